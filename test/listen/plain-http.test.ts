/**
 * Plain HTTP to the HTTPS port: a plain-HTTP 400 that says to use https, not an empty reply; TLS
 * (h1 and h2) is served as before; a connection that sends nothing is closed by the deadline.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, h2Session, SHORT_DEADLINES, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let h: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  h = await startEdge(testConfig([broker.url], { server: SHORT_DEADLINES }));
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
});

/** Connects to the HTTPS port over plain TCP, writes `text`, and resolves with everything read until the server closes. */
function rawExchange(text: string): Promise<string> {
  const port = Number(new URL(h.url).port);
  return new Promise((resolve, reject) => {
    const socket: Socket = connect(port, '127.0.0.1', () => {
      if (text) socket.write(text);
    });
    let got = '';
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (got += c));
    socket.on('error', reject);
    socket.on('close', () => resolve(got));
  });
}

describe('the HTTPS port', () => {
  it('answers plain HTTP with a plain-HTTP 400 saying to use https, then closes', async () => {
    const answer = await rawExchange('GET /health HTTP/1.1\r\nhost: acme.localhost\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(answer).toContain('connection: close\r\n');
    const body = answer.slice(answer.indexOf('\r\n\r\n') + 4);
    expect(JSON.parse(body)).toEqual({ error: 'plain HTTP was sent to the HTTPS port: use https://', code: 'invalid_request' });
  });

  it('still serves TLS, HTTP/1.1 and h2', async () => {
    expect((await call(h, 'GET', '/health')).status).toBe(200);
    const session = await h2Session(h.url);
    try {
      const status = await new Promise<number>((resolve, reject) => {
        const s = session.request({ ':path': '/health', ':authority': 'acme.localhost' });
        s.on('response', (headers) => resolve(Number(headers[':status'])));
        s.on('error', reject);
        s.resume();
      });
      expect(status).toBe(200);
    } finally {
      session.close();
    }
  });

  it('closes a connection that sends nothing (the handshake deadline)', async () => {
    expect(await rawExchange('')).toBe('');
  });
});
