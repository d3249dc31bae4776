/**
 * A streamed h2 body goes to undici as a PassThrough copy, destroyed with an error when the h2
 * stream closes before its body ended. When undici never took the copy (no broker reachable) or
 * gave it back unread (connect failure), that error must not become an uncaught exception.
 */
import http2 from 'node:http2';
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { h2Session, h2Settled, SHORT_DEADLINES, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';

let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;
const uncaught: unknown[] = [];
const onUncaught = (err: unknown): void => {
  uncaught.push(err);
};

async function deadPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

beforeAll(async () => {
  process.on('uncaughtException', onUncaught);
  edge = await startEdge(testConfig([`http://127.0.0.1:${await deadPort()}`], { server: SHORT_DEADLINES }));
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  session = await h2Session(edge.url);
});
afterAll(async () => {
  process.off('uncaughtException', onUncaught);
  session?.destroy();
  await edge?.close();
});

function partialUpload(): { stream: http2.ClientHttp2Stream; status: Promise<number> } {
  uncaught.length = 0;
  const stream = session.request(
    {
      ':method': 'POST',
      ':path': '/api/v1/lease/l-1/extend',
      ':authority': 'acme.localhost',
      authorization: `Bearer ${rw}`,
      'content-type': 'application/json',
      'content-length': '100',
    },
    { endStream: false },
  );
  stream.on('error', () => {});
  stream.write('{"seconds":'); // 11 of the 100 declared bytes; the body is never finished
  const status = new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
  stream.resume();
  return { stream, status };
}

describe('streamed h2 body, no broker reachable', () => {
  it.each([
    ['CANCEL', http2.constants.NGHTTP2_CANCEL],
    ['INTERNAL_ERROR', http2.constants.NGHTTP2_INTERNAL_ERROR],
  ])('a client that resets its stream (%s) after the 502/503 does not crash the edge', async (_name, code) => {
    const { stream, status } = partialUpload();
    expect([502, 503]).toContain(await status);
    stream.close(code);
    await h2Settled(session);
    expect(uncaught).toEqual([]);
  });

  it('a client that never finishes its body does not crash the edge at the request deadline', async () => {
    const { stream, status } = partialUpload();
    expect([502, 503]).toContain(await status);
    await waitForEvent(stream, 'close', 10_000, 'the request deadline to reset the stream');
    await h2Settled(session);
    expect(uncaught).toEqual([]);
  });
});
