/**
 * What serving h2 on the stream API must keep from Node's compatibility layer, and what the
 * edge's own h2 deadlines must not cost others: a relay cut short reaches the client as a reset
 * stream (never as a clean end), an unknown expectation gets 417, and uploads cut by the body
 * deadline are the client's failure, not the broker's.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { forwarded, h2Session, SHORT_DEADLINES, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  // No active probes during the test: only passive reports could mark the broker down.
  // The body deadline is the longest of requestTimeoutMs and a parked poll: both short here.
  edge = await startEdge(
    testConfig([broker.url], {
      server: SHORT_DEADLINES,
      upstream: { healthIntervalMs: 60_000 },
    }),
  );
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  session = await h2Session(edge.url);
});

afterAll(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
});

interface Outcome {
  status: number;
  bytes: number;
  /** The stream ended cleanly ('end' before 'close'). */
  ended: boolean;
  rstCode: number;
}

function request(headers: http2.OutgoingHttpHeaders, body?: string): { stream: http2.ClientHttp2Stream; outcome: Promise<Outcome> } {
  const stream = session.request({ ':authority': 'acme.localhost', authorization: `Bearer ${rw}`, ...headers }, { endStream: body === undefined });
  if (body !== undefined) stream.write(body);
  stream.on('error', () => {});
  const outcome = new Promise<Outcome>((resolve) => {
    const o: Outcome = { status: 0, bytes: 0, ended: false, rstCode: 0 };
    stream.on('response', (h) => (o.status = Number(h[':status'])));
    stream.on('data', (d: Buffer) => (o.bytes += d.length));
    stream.on('end', () => (o.ended = true));
    stream.on('close', () => resolve({ ...o, rstCode: stream.rstCode ?? 0 }));
  });
  return { stream, outcome };
}

describe('h2 on the stream API', () => {
  it('a relay the broker cuts short (content-length 100, 10 bytes) reaches the client as a reset stream, not a clean end', async () => {
    broker.fault('truncate', 1);
    const o = await request({ ':method': 'GET', ':path': '/api/v1/resources' }).outcome;
    expect(o.status).toBe(200);
    expect(o.bytes).toBeLessThan(100);
    expect(o.ended).toBe(false);
    expect(o.rstCode).not.toBe(http2.constants.NGHTTP2_NO_ERROR);
  });

  it('an expectation other than 100-continue gets 417, and nothing is forwarded', async () => {
    const before = forwarded(broker).length;
    const o = await request({ ':method': 'GET', ':path': '/api/v1/resources', expect: 'something-else' }).outcome;
    expect(o.status).toBe(417);
    expect(forwarded(broker).length).toBe(before);
  });

  it('CONNECT gets 405, and nothing is forwarded', async () => {
    const before = forwarded(broker).length;
    const stream = session.request({ ':method': 'CONNECT', ':authority': 'acme.localhost:443' });
    stream.on('error', () => {});
    const status = await new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
    expect(status).toBe(405);
    expect(forwarded(broker).length).toBe(before);
    stream.close();
  });

  it('uploads cut by the body deadline (408) do not count against the broker: the next request is served', async () => {
    // Three uploads that declare 100 bytes, send 6 and stall: the edge answers 408 at requestTimeoutMs.
    const stalled = Array.from({ length: 3 }, () =>
      request({ ':method': 'POST', ':path': '/api/v1/lease/l-1/extend', 'content-type': 'application/json', 'content-length': '100' }, '{"a":1'),
    );
    const outcomes = await Promise.all(stalled.map((s) => s.outcome));
    expect(outcomes.map((o) => o.status)).toEqual([408, 408, 408]);
    // Three passive failures would mark the broker down (downAfter 3), and no probe would bring it back.
    const next = await request({ ':method': 'GET', ':path': '/api/v1/pop/queue/q?wait=false' }).outcome;
    expect(next.status).toBe(204);
  });
});
