/**
 * Refused h2 bodies do not use up their session (docs/security.md, "HTTP/2 deadlines"). A request
 * refused from its head (here 401) is answered before its body is read. Reset after its answer
 * while the client still sent the body, the stream was never closed by Node's client, which kept
 * the unsent DATA counted against its session's memory: after about 300 such refusals every later
 * stream of the session failed. The edge reads the body to its end instead (up to 64 KiB): after
 * many such refusals on one connection, a valid request on it is still answered, no GOAWAY.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { h2Session, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(testConfig([broker.url]));
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
});
afterAll(async () => {
  await edge?.close();
  await broker?.close();
});

/** 32 KiB: under the size a refusal drains rather than resets (64 KiB), so the body is not refused unread by a reset. */
const REFUSED_BODY = Buffer.alloc(32 * 1024, 0x20);
const BODY = JSON.stringify({ items: [{ queue: 'q', payload: 1 }] });

/** A push on `session` with `body`; its status and how its stream ended. */
function push(
  session: http2.ClientHttp2Session,
  body: Buffer | string,
  authorization: string,
  headers: http2.OutgoingHttpHeaders = { 'content-length': String(Buffer.byteLength(body)) },
): Promise<{ status: number; rstCode: number | undefined }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': '/api/v1/push',
      ':authority': 'acme.localhost',
      authorization,
      'content-type': 'application/json',
      ...headers,
    });
    let status = 0;
    stream.on('response', (h) => {
      status = Number(h[':status']);
    });
    stream.on('error', () => {});
    stream.resume();
    stream.on('close', () =>
      status === 0 ? reject(new Error(`stream closed without an answer (rst ${stream.rstCode})`)) : resolve({ status, rstCode: stream.rstCode }),
    );
    stream.end(body);
  });
}

describe('h2 refused bodies', () => {
  it('1,000 refusals of 32 KiB bodies sent whole on one session, 32 at a time, leave it serving: the next push is answered 201', async () => {
    const session = await h2Session(edge.url);
    let goaway = false;
    session.on('goaway', () => {
      goaway = true;
    });
    try {
      // 32 MiB refused in all: three times the session memory nghttp2 allows, far over any window.
      for (let round = 0; round < 1000 / 32; round++) {
        const refused = await Promise.all(Array.from({ length: 32 }, () => push(session, REFUSED_BODY, 'Bearer not-a-token')));
        expect(new Set(refused.map((r) => r.status))).toEqual(new Set([401]));
      }
      expect((await push(session, BODY, `Bearer ${rw}`)).status).toBe(201);
      expect(goaway).toBe(false);
      expect(session.closed).toBe(false);
    } finally {
      session.destroy();
    }
  }, 20_000);

  it("a body past 64 KiB on a stream answered before reading it (the listener's 417) is cut with RST_STREAM NO_ERROR after the answer; the session serves on", async () => {
    // Node's client keeps the unsent rest of a reset stream's body counted against its own session
    // memory (10 MB by default): room for 20 MiB of it, so the edge's side is what is tested.
    const session = http2.connect(edge.url, { rejectUnauthorized: false, maxSessionMemory: 100 });
    session.on('error', () => {});
    await waitForEvent(session, 'connect', 5000, 'the h2 session');
    try {
      // 20 MiB sent in all: twice the session memory nghttp2 allows the edge.
      for (let i = 0; i < 20; i++) {
        // No content-length: nothing bounds the body but the edge.
        const r = await push(session, Buffer.alloc(1024 * 1024, 0x20), `Bearer ${rw}`, { expect: 'something-else' });
        expect(r).toEqual({ status: 417, rstCode: http2.constants.NGHTTP2_NO_ERROR });
      }
      // Each body was cut once the edge had read 64 KiB past its answer, not read to its end: the
      // client could send little more than the stream's window and what the edge read of it.
      expect(session.socket.bytesWritten).toBeLessThan(20 * 512 * 1024);
      expect((await push(session, BODY, `Bearer ${rw}`)).status).toBe(201);
      expect(session.closed).toBe(false);
    } finally {
      session.destroy();
    }
  });
});
