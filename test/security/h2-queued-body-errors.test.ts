/**
 * While an upstream request waits in undici's pool queue (every connection to the broker busy),
 * nothing in undici holds the PassThrough copy of its h2 body yet. Neither of these may throw in
 * the edge process (the test records uncaught exceptions instead of dying):
 *  - an error reset of the client stream, which destroys the copy with an error;
 *  - a complete body then RST_STREAM(NO_ERROR), which leaves the stream closed but not destroyed
 *    until the 408 deadline, whose answer must not be written to the closed stream.
 */
import http2 from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { h2Session, h2Settled, SHORT_DEADLINES, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';

let broker: BrokerDouble | undefined;
let edge: EdgeHarness | undefined;
let session: http2.ClientHttp2Session | undefined;
const uncaught: unknown[] = [];
let captured = capturingLogger('debug');
/**
 * Long enough for a loaded machine to see the upload queued before the body deadline ends it
 * (1.5 s was not: the request was gone before the first look), short enough for the test that
 * waits for the deadline.
 */
const REQUEST_TIMEOUT_MS = 4000;
const onUncaught = (err: unknown): void => {
  uncaught.push(err);
};

async function setup(): Promise<{ session: http2.ClientHttp2Session; rw: string; hung: http2.ClientHttp2Stream }> {
  uncaught.length = 0;
  process.on('uncaughtException', onUncaught);
  broker = await startBrokerDouble();
  captured = capturingLogger('debug');
  edge = await startEdge(
    testConfig([broker.url], {
      server: { ...SHORT_DEADLINES, requestTimeoutMs: REQUEST_TIMEOUT_MS },
      // A dedicated broker: the edge sends a shared broker no more than its connections (the rest
      // wait in their tenant's queue, docs/clusters.md), so only a tenant's own requests can queue
      // inside undici's pool.
      upstream: { connections: 1 },
    }),
    { log: captured.log },
  );
  const rw = await token({ roles: ['read-write'], tenant: 'acme' });
  const s = await h2Session(edge.url);
  session = s;
  // The pool's only connection is taken by a request the broker never answers.
  // (By path: a health probe could otherwise be the request that hangs.)
  broker.faultWhen((r) => (r.path === '/api/v1/resources' ? 'hang' : null));
  const hung = s.request({ ':method': 'GET', ':path': '/api/v1/resources', ':authority': 'acme.localhost', authorization: `Bearer ${rw}` });
  hung.on('error', () => {});
  await broker.waitForRequests(1, (r) => r.path === '/api/v1/resources');
  return { session: s, rw, hung };
}

afterEach(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
  process.off('uncaughtException', onUncaught);
});

/** Requests the edge has in flight to the broker, queued in the pool included (queen_edge_broker_inflight). */
async function inflight(): Promise<number> {
  const m = await edge!.app.metrics.getSingleMetric('queen_edge_broker_inflight')!.get();
  return m.values.find((v) => v.labels.broker === broker!.url)?.value ?? 0;
}

function upload(s: http2.ClientHttp2Session, rw: string, length: number): http2.ClientHttp2Stream {
  const stream = s.request(
    {
      ':method': 'POST',
      ':path': '/api/v1/lease/l-1/extend',
      ':authority': 'acme.localhost',
      authorization: `Bearer ${rw}`,
      'content-type': 'application/json',
      'content-length': String(length),
    },
    { endStream: false },
  );
  stream.on('error', () => {});
  return stream;
}

describe('streamed h2 body whose upstream request waits in the pool queue', () => {
  it('a client error reset (INTERNAL_ERROR) part way: no uncaught error from the PassThrough copy', async () => {
    const { session: s, rw, hung } = await setup();
    const up = upload(s, rw, 200_000);
    up.write(Buffer.alloc(10_000, 0x20));
    await waitFor(async () => (await inflight()) === 2, 5000, 'the upload queued behind the hung request');
    up.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    // The edge destroyed the copy when it read the reset; the error it emits comes on the next tick.
    await h2Settled(s);
    hung.close();
    expect(uncaught).toEqual([]);
  });

  it('a complete body then RST_STREAM(NO_ERROR): no throw from the 408 deadline', async () => {
    const { session: s, rw, hung } = await setup();
    const up = upload(s, rw, 60_000);
    up.end(Buffer.alloc(60_000, 0x20)); // fits the stream window; more than the PassThrough holds
    await waitFor(async () => (await inflight()) === 2, 5000, 'the upload queued behind the hung request');
    up.close(http2.constants.NGHTTP2_NO_ERROR);
    // The request deadline must fire while the upload is still queued (the request was logged
    // when its client left, and the closed stream gets no 408): its debug line says it did, and
    // a throw from it would have reached the uncaught handler in the same turn.
    await waitFor(
      () => captured.lines.some((l) => l.msg === 'HTTP/2 request body not received in time: stream cancelled'),
      2 * REQUEST_TIMEOUT_MS,
      'the request deadline',
    );
    expect(await inflight()).toBe(2);
    hung.close();
    expect(uncaught).toEqual([]);
  });
});
