/**
 * HTTP/2 gets the guards h1 has: a request body trickled one DATA frame at a time is cut at the
 * request deadline, a connection that never sends its preface is closed at the header timeout, and
 * the header limit is the same 16 KB.
 */
import http2 from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { forwarded, h2Session, SHORT_DEADLINES, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(
    testConfig([broker.url], {
      server: SHORT_DEADLINES,
    }),
  );
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  session = await h2Session(edge.url);
});
afterAll(async () => {
  session.close();
  await edge.close();
  await broker.close();
});

function statusOf(stream: http2.ClientHttp2Stream): Promise<number | string> {
  return new Promise((resolve) => {
    stream.once('response', (h) => resolve(Number(h[':status'])));
    stream.once('close', () => resolve(`closed (rst ${stream.rstCode})`));
    stream.on('error', () => {});
    stream.resume();
  });
}

describe('h2 deadlines', () => {
  it('a push body trickled one DATA byte at a time is cut at the request deadline: 408, nothing forwarded', async () => {
    const before = forwarded(broker).length;
    const stream = session.request(
      { ':method': 'POST', ':path': '/api/v1/push', ':authority': 'acme.localhost', authorization: `Bearer ${rw}`, 'content-type': 'application/json' },
      { endStream: false },
    );
    const body = `{"items":[{"queue":"q","payload":"${'x'.repeat(10_000)}`;
    let sent = 0;
    const trickle = setInterval(() => {
      if (!stream.closed && !stream.destroyed) stream.write(body[sent++ % body.length]!);
    }, 100);
    try {
      expect(await statusOf(stream)).toBe(408);
    } finally {
      clearInterval(trickle);
      stream.close();
    }
    expect(forwarded(broker).length).toBe(before);
    // The session survives: only that stream was cut.
    const ok = session.request({ ':method': 'GET', ':path': '/health', ':authority': 'acme.localhost' });
    expect(await statusOf(ok)).toBe(200);
  });

  it('a connection that negotiates h2 and never sends the preface is closed at the header timeout', async () => {
    const port = Number(new URL(edge.url).port);
    const socket = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['h2'], servername: 'localhost' });
    socket.on('error', () => {});
    await new Promise((r) => socket.once('secureConnect', r));
    expect(socket.alpnProtocol).toBe('h2');
    socket.resume(); // read the server's SETTINGS and GOAWAY, so the end of the stream is seen
    await waitForEvent(socket, 'close', 5000, 'the edge to close the connection at the header timeout');
    expect(socket.destroyed).toBe(true);
  });

  it.each([20_000, 60_000])('request headers over 16 KB (%i) get 431 on h2 as on h1; under it they pass', async (size) => {
    // A fresh session, the request queued before connecting: a client that already has the edge's
    // SETTINGS refuses to send the list itself, as a hostile client would not.
    const fresh = http2.connect(edge.url, { rejectUnauthorized: false });
    fresh.on('error', () => {});
    try {
      const big = fresh.request({ ':method': 'GET', ':path': '/health', ':authority': 'acme.localhost', 'x-pad': 'a'.repeat(size) });
      expect(await statusOf(big)).toBe(431);
    } finally {
      fresh.close();
    }
    const small = session.request({ ':method': 'GET', ':path': '/health', ':authority': 'acme.localhost', 'x-pad': 'a'.repeat(10_000) });
    expect(await statusOf(small)).toBe(200);
  });
});
