/**
 * h2 refusals that must end only what they refuse.
 *
 * A stream over the served limit of concurrent h2 streams is refused alone, with RST_STREAM
 * REFUSED_STREAM (RFC 9113 §8.7: not processed, safe to retry): the session and its other streams
 * keep going. nghttp2 answers a stream over the advertised limit with GOAWAY PROTOCOL_ERROR, which
 * loses every stream of the connection, so the edge advertises more than it serves.
 *
 * An h2 body measured over the limit (no content-length) is refused with 413 after readBody paused
 * its stream. Node frees a closed stream only once its readable side ends, which a paused body
 * never does: unless the edge destroys the stream once its answer and RST_STREAM(NO_ERROR) are out,
 * the stream and its buffered body stay in the session and a drain waits for the force timeout.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_CONCURRENT_STREAMS } from '../../src/listen/servers.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { h2Session, h2Settled, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  // A pool share that takes all 256 streams of one tenant (in flight or queued): the refusal tested is the session's.
  edge = await startEdge(testConfig([broker.url], { server: { bodyLimitBytes: 1000 }, upstream: { connections: 256, tenantShare: 1 } }));
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  session = await h2Session(edge.url);
});
afterAll(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
});

const BODY = JSON.stringify({ items: [{ queue: 'q', payload: 1 }] });

/** A push whose body is announced but not sent yet: the edge holds its stream open, waiting. */
function pendingPush(): http2.ClientHttp2Stream {
  const stream = session.request(
    {
      ':method': 'POST',
      ':path': '/api/v1/push',
      ':authority': 'acme.localhost',
      authorization: `Bearer ${rw}`,
      'content-type': 'application/json',
      'content-length': String(BODY.length),
    },
    { endStream: false },
  );
  stream.on('error', () => {});
  return stream;
}

function status(stream: http2.ClientHttp2Stream): Promise<number> {
  return new Promise((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
}

describe('h2 streams over the served limit', () => {
  it('the one over the limit gets RST_STREAM REFUSED_STREAM; the session and its other streams are served', async () => {
    let goaway = false;
    session.on('goaway', () => {
      goaway = true;
    });
    const held = Array.from({ length: MAX_CONCURRENT_STREAMS }, pendingPush);
    // Sent after the others on the same connection, so the edge sees it while they are all open.
    const over = pendingPush();
    await waitForEvent(over, 'close', 5000, 'the stream over the limit to be refused');
    expect(over.rstCode).toBe(http2.constants.NGHTTP2_REFUSED_STREAM);

    // Every held stream is still served once its body comes.
    const statuses = held.map(status);
    for (const s of held) s.end(BODY);
    expect(new Set(await Promise.all(statuses))).toEqual(new Set([201]));
    // And the session takes new streams.
    const again = pendingPush();
    const answered = status(again);
    again.end(BODY);
    expect(await answered).toBe(201);
    expect(goaway).toBe(false);
    expect(session.closed).toBe(false);
  });
});

describe('h2 body over the limit without content-length', () => {
  it('gets 413 and its stream is gone: the edge drains without waiting for the force timeout', async () => {
    const stream = session.request(
      { ':method': 'POST', ':path': '/api/v1/push', ':authority': 'acme.localhost', authorization: `Bearer ${rw}`, 'content-type': 'application/json' },
      { endStream: false },
    );
    stream.on('error', () => {});
    stream.end(`{"items":[${'x'.repeat(20_000)}]}`); // a complete (well-behaved) upload
    expect(await status(stream)).toBe(413);
    stream.resume();
    await waitForEvent(stream, 'close', 5000, 'the refused stream to close');
    await h2Settled(session);
    const started = Date.now();
    await edge.app.close(4000);
    expect(Date.now() - started).toBeLessThan(1000);
  });
});
