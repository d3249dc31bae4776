/**
 * Admission before the body (docs/limits.md): a throttled tenant's refusal is answered from the
 * request head, without waiting for (or, with Expect: 100-continue, inviting) its body; bodies the
 * edge does not parse are streamed to the broker as they arrive.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect as h2connect } from 'node:http2';
import { connect, type TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';

const HOST = 'acme.localhost';

/** A raw TLS connection whose received bytes can be awaited up to a marker. */
async function rawClient(port: number): Promise<{ socket: TLSSocket; until(marker: string): Promise<string>; closed: Promise<void> }> {
  const socket = await new Promise<TLSSocket>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }, () => resolve(s));
    s.once('error', reject);
  });
  let received = '';
  const waiters: Array<() => void> = [];
  socket.on('data', (d: Buffer) => {
    received += d.toString('latin1');
    for (const w of waiters.splice(0)) w();
  });
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return {
    socket,
    closed,
    async until(marker: string) {
      while (!received.includes(marker)) {
        if (socket.destroyed) throw new Error(`connection closed; got ${JSON.stringify(received)}`);
        await new Promise<void>((r) => waiters.push(r));
      }
      const at = received.indexOf(marker) + marker.length;
      const out = received.slice(0, at);
      received = received.slice(at);
      return out;
    },
  };
}

function head(path: string, tok: string, length: number, extra = ''): string {
  return `POST ${path} HTTP/1.1\r\nhost: ${HOST}\r\nauthorization: Bearer ${tok}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n${extra}\r\n`;
}

describe('admit before the body', () => {
  let broker: Server;
  let heads: Array<() => void> = [];
  let bodies: Buffer[] = [];
  let h: EdgeHarness;
  let tok: string;

  beforeAll(async () => {
    // A broker that reports each request head as it arrives, before its body.
    broker = createServer((req: IncomingMessage, res) => {
      if (req.url !== '/health') for (const w of heads.splice(0)) w();
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.url !== '/health') bodies.push(Buffer.concat(chunks));
        res.writeHead(req.url === '/api/v1/push' ? 201 : 200, { 'content-type': 'application/json' });
        res.end(req.url === '/api/v1/push' ? '[]' : '{}');
      });
    });
    await new Promise<void>((r) => broker.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(broker.address() as AddressInfo).port}`;
    h = await startEdge(
      testConfig([url], {
        plans: {
          test: TEST_PLAN,
          slow: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 0.001, requestBurst: 1, maxPayloadBytes: 2_000_000 } },
          // One request per 4 s: its refusal's wait ends within the test.
          paced: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 0.25, requestBurst: 1, maxPayloadBytes: 2_000_000 } },
          steady: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 1, requestBurst: 1 } },
        },
        tenants: {
          // One broker for all: declared tenancy-aware, as a shared broker must be.
          acme: { plan: 'test', hosts: [HOST], brokers: [url], tenancyAwareBrokers: true },
          slow: { plan: 'slow', hosts: ['slow.localhost'], brokers: [url], tenancyAwareBrokers: true },
          paced: { plan: 'paced', hosts: ['paced.localhost'], brokers: [url], tenancyAwareBrokers: true },
          steady: { plan: 'steady', hosts: ['steady.localhost'], brokers: [url], tenancyAwareBrokers: true },
        },
      }),
    );
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
  });

  afterAll(async () => {
    await h?.close();
    await new Promise<void>((r) => broker?.close(() => r()));
  });

  /** A token for the throttled tenant, whose one request is spent and whose refusal is cached. */
  async function throttled(): Promise<{ tok: string; headFor: (length: number, extra?: string) => string }> {
    const t = await token({ roles: ['read-write'], tenant: 'slow' });
    const send = () => call(h, 'POST', '/api/v1/push', { token: t, host: 'slow.localhost', body: { items: [{ queue: 'q', payload: 1 }] } });
    await send();
    expect((await send()).status).toBe(429);
    return { tok: t, headFor: (length, extra = '') => head('/api/v1/push', t, length, extra).replace(HOST, 'slow.localhost') };
  }

  it('a throttled tenant gets its 429 from the request head alone, and the connection is closed rather than drained', async () => {
    const { headFor } = await throttled();
    const c = await rawClient(Number(new URL(h.url).port));
    // Only the head of a 1 MB push is sent: an edge that read the body first would wait for ever.
    c.socket.write(headFor(1_000_000));
    const answer = await c.until('\r\n\r\n');
    expect(answer).toMatch(/^HTTP\/1\.1 429 /);
    expect(answer.toLowerCase()).toContain('connection: close');
    expect(answer.toLowerCase()).toContain('retry-after:');
    await c.closed;
  });

  it('on h2 throttled uploads get their 429 and their streams are reset with NO_ERROR, so the session keeps serving', async () => {
    const { tok: t } = await throttled();
    const session = h2connect(h.url, { rejectUnauthorized: false });
    try {
      const refused = Array.from({ length: 20 }, async () => {
        const stream = session.request({
          ':method': 'POST',
          ':path': '/api/v1/push',
          ':authority': 'slow.localhost',
          authorization: `Bearer ${t}`,
          'content-type': 'application/json',
          'content-length': '1000000',
        });
        // More than a window each: unread, the bodies would fill the session's window and stall it.
        stream.write(Buffer.alloc(200_000, 'a'));
        const status = await new Promise<number>((r) => stream.once('response', (hd) => r(Number(hd[':status']))));
        stream.resume();
        const code = await new Promise<number>((r) => stream.once('close', () => r(stream.rstCode ?? -1)));
        return [status, code];
      });
      expect(await Promise.all(refused)).toEqual(Array.from({ length: 20 }, () => [429, 0]));
      const next = session.request({ ':method': 'GET', ':path': '/api/v1/pop/queue/q', ':authority': HOST, authorization: `Bearer ${tok}` });
      next.end();
      const nextStatus = await new Promise<number>((r) => next.once('response', (hd) => r(Number(hd[':status']))));
      expect(nextStatus).toBe(200);
      next.resume();
    } finally {
      session.destroy();
    }
  });

  it('with Expect: 100-continue a throttled tenant is never invited to upload', async () => {
    const { headFor } = await throttled();
    const c = await rawClient(Number(new URL(h.url).port));
    c.socket.write(headFor(1_000_000, 'expect: 100-continue\r\n'));
    const first = await c.until('\r\n\r\n');
    expect(first).toMatch(/^HTTP\/1\.1 429 /);
    c.socket.destroy();
  });

  it("once a refusal's wait ends, only as many uploads as the bucket refilled are invited; the rest are refused from their heads", async () => {
    const t = await token({ roles: ['read-write'], tenant: 'paced' });
    const send = () => call(h, 'POST', '/api/v1/push', { token: t, host: 'paced.localhost', body: { items: [{ queue: 'q', payload: 1 }] } });
    expect((await send()).status).toBe(201);
    const refused = await send();
    expect(refused.status).toBe(429);
    // Past the wait the edge named, one request has refilled (the next one only 4 s later).
    await new Promise((r) => setTimeout(r, Number(refused.headers['retry-after']) * 1000));
    const port = Number(new URL(h.url).port);
    // The invited ones stay (their bodies could still come) until all ten are answered.
    const clients = await Promise.all(Array.from({ length: 10 }, () => rawClient(port)));
    const firstLines = await Promise.all(
      clients.map(async (c) => {
        c.socket.write(head('/api/v1/push', t, 1_000_000, 'expect: 100-continue\r\n').replace(HOST, 'paced.localhost'));
        return (await c.until('\r\n\r\n')).split('\r\n')[0] ?? '';
      }),
    );
    for (const c of clients) c.socket.destroy();
    // Without the local copy of the bucket, all ten would be invited, each to upload 1 MB only to be refused after it.
    expect(firstLines.filter((l) => l === 'HTTP/1.1 100 Continue')).toHaveLength(1);
    expect(firstLines.filter((l) => l.startsWith('HTTP/1.1 429 '))).toHaveLength(9);
  });

  it("heads let through that never reach the limiter (malformed pushes) do not hold back the tenant's valid ones", async () => {
    const t = await token({ roles: ['read-write'], tenant: 'steady' });
    const push = (body: unknown) => call(h, 'POST', '/api/v1/push', { token: t, host: 'steady.localhost', body });
    expect((await push({ items: [{ queue: 'q', payload: 1 }] })).status).toBe(201);
    expect((await push({ items: [{ queue: 'q', payload: 1 }] })).status).toBe(429);
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) {
      // More than one interval (1 s): the store's bucket holds a request each round.
      await new Promise((r) => setTimeout(r, 1100));
      expect((await push('{"items": [')).status).toBe(400);
      statuses.push((await push({ items: [{ queue: 'q', payload: i }] })).status);
    }
    expect(statuses).toEqual([201, 201, 201]);
  });

  it('with Expect: 100-continue an admitted push gets 100 Continue, then its body is read and forwarded', async () => {
    const body = JSON.stringify({ items: [{ queue: 'q', payload: 'continued' }] });
    const c = await rawClient(Number(new URL(h.url).port));
    c.socket.write(head('/api/v1/push', tok, Buffer.byteLength(body), 'expect: 100-continue\r\n'));
    expect(await c.until('\r\n\r\n')).toMatch(/^HTTP\/1\.1 100 Continue/);
    bodies = [];
    c.socket.write(body);
    expect(await c.until('\r\n\r\n')).toMatch(/^HTTP\/1\.1 201 /);
    expect(bodies.map((b) => b.toString())).toEqual([body]);
    c.socket.destroy();
  });

  it('a body the edge does not parse reaches the broker while it is still arriving, byte for byte', async () => {
    const body = Buffer.alloc(300_000, 'a');
    const c = await rawClient(Number(new URL(h.url).port));
    const arrived = new Promise<void>((r) => heads.push(r));
    bodies = [];
    c.socket.write(head('/api/v1/configure', tok, body.length));
    c.socket.write(body.subarray(0, 1000));
    // A buffering edge would forward nothing until the last byte: the broker sees the head first.
    await arrived;
    c.socket.write(body.subarray(1000));
    expect(await c.until('\r\n\r\n')).toMatch(/^HTTP\/1\.1 200 /);
    expect(bodies).toHaveLength(1);
    expect(bodies[0]!.equals(body)).toBe(true);
    c.socket.destroy();
    heads = [];
  });

  it('a client that leaves in the middle of a streamed upload costs the broker the request, not the edge its health', async () => {
    const c = await rawClient(Number(new URL(h.url).port));
    const arrived = new Promise<void>((r) => heads.push(r));
    c.socket.write(head('/api/v1/configure', tok, 100_000));
    c.socket.write(Buffer.alloc(1000, 'c'));
    await arrived;
    c.socket.destroy();
    const r = await call(h, 'POST', '/api/v1/configure', { token: tok, body: { after: true } });
    expect(r.status).toBe(200);
  });

  it('over h2 a streamed body reaches the broker byte for byte too', async () => {
    const body = Buffer.alloc(200_000, 'b');
    bodies = [];
    const session = h2connect(h.url, { rejectUnauthorized: false });
    try {
      const stream = session.request({
        ':method': 'POST',
        ':path': '/api/v1/configure',
        ':authority': HOST,
        authorization: `Bearer ${tok}`,
        'content-type': 'application/json',
        'content-length': String(body.length),
      });
      stream.end(body);
      const status = await new Promise<number>((r) => stream.once('response', (hd) => r(Number(hd[':status']))));
      stream.resume();
      await new Promise<void>((r) => stream.once('close', () => r()));
      expect(status).toBe(200);
      expect(bodies).toHaveLength(1);
      expect(bodies[0]!.equals(body)).toBe(true);
    } finally {
      session.destroy();
    }
  });

  it('a streamed body declared over the plan limit is refused with 413 and never forwarded', async () => {
    bodies = [];
    const r = await call(h, 'POST', '/api/v1/configure', { token: tok, body: 'x'.repeat(TEST_PLAN.limits.maxPayloadBytes + 1) });
    expect(r.status).toBe(413);
    expect(r.json).toEqual({ error: expect.any(String), code: 'payload_too_large' });
    expect(bodies).toEqual([]);
  });
});
