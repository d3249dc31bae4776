/**
 * An h2 body measured over the limit (no content-length) is refused with 413 after readBody paused
 * its stream. Node frees a closed stream only once its readable side ends, which a paused body
 * never does: unless the edge destroys the stream once its answer and RST_STREAM(NO_ERROR) are out,
 * the stream and its buffered body stay in the session and a drain waits for the force timeout.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { h2Session, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(testConfig([broker.url], { server: { bodyLimitBytes: 1000 } }));
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  session = await h2Session(edge.url);
});
afterAll(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
});

describe('h2 body over the limit without content-length', () => {
  it('gets 413 and its stream is gone: the edge drains without waiting for the force timeout', async () => {
    const stream = session.request(
      { ':method': 'POST', ':path': '/api/v1/push', ':authority': 'acme.localhost', authorization: `Bearer ${rw}`, 'content-type': 'application/json' },
      { endStream: false },
    );
    stream.on('error', () => {});
    stream.end('{"items":[' + 'x'.repeat(20_000) + ']}'); // a complete (well-behaved) upload
    const status = await new Promise<number>((r) => stream.once('response', (h) => r(Number(h[':status']))));
    expect(status).toBe(413);
    stream.resume();
    await new Promise((r) => stream.once('close', r));
    await new Promise((r) => setTimeout(r, 200));
    const started = Date.now();
    await edge.app.close(4000);
    expect(Date.now() - started).toBeLessThan(1000);
  });
});
