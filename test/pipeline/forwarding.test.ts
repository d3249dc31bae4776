/** Forwarding (docs/architecture.md): headers, bodies, 204s, long polls, aborts, upstream failures. */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import { request } from 'undici';
import { jwtVerify } from 'jose';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { rawTls } from '../helpers/raw.js';
import { waitFor } from '../helpers/wait.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1', cors: true });
  edge = await startEdge(
    testConfig([broker.url], {
      server: { longPoll: { defaultTimeoutMs: 1500, maxTimeoutMs: 2000, slackMs: 1000 } },
      upstream: { requestTimeoutMs: 1500, downAfter: 1000, connections: 4, healthIntervalMs: 600000 },
    }),
  );
  // The health checker's first probe must be out of the way of one-shot faults.
  await broker.waitForRequests(1, (q) => q.path === '/health');
  rw = await token({ roles: ['read-write'], tenant: 'acme', sub: 'svc' });
});
afterAll(async () => {
  await edge.close();
  await broker.close();
});
beforeEach(() => {
  broker.clearFaults();
  broker.setOptions({ emptyPopMode: 'no-content', pushStatus: 201 });
});

const push = (n = 1) => ({ items: Array.from({ length: n }, (_, i) => ({ queue: 'fw', partition: 'p', payload: { i } })) });

describe('request headers upstream', () => {
  it('sends only the allowlist plus X-Forwarded-* and X-Request-Id', async () => {
    const r = await call(edge, 'POST', '/api/v1/push', {
      token: rw,
      body: push(),
      headers: {
        cookie: 'sid=secret',
        'x-queen-tenant': 'globex',
        'x-forwarded-for': '6.6.6.6',
        'x-forwarded-host': 'spoof',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        'x-request-id': 'req-abc',
      },
    });
    expect(r.status).toBe(201);
    expect(r.headers['x-request-id']).toBe('req-abc');
    const seen = forwarded(broker).at(-1)!.headers;
    expect(seen.cookie).toBeUndefined();
    expect(seen['x-queen-tenant']).toBeUndefined();
    expect(seen['x-forwarded-for']).toBe('127.0.0.1');
    expect(seen['x-forwarded-host']).toBe('acme.localhost');
    expect(seen['x-forwarded-proto']).toBe('https');
    expect(seen['x-request-id']).toBe('req-abc');
    expect(seen.traceparent).toBe('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    expect(seen.host).toBe(new URL(broker.url).host);
    expect(seen.authorization).toBe(`Bearer ${rw}`);
  });

  it('relays the body byte for byte', async () => {
    const text = '{"items":[{"queue":"fw","partition":"p","payload":{"x":"é"}}]}  ';
    await call(edge, 'POST', '/api/v1/push', { token: rw, body: text });
    expect(forwarded(broker).at(-1)!.body.toString('utf8')).toBe(text);
  });

  it("removes the broker's CORS headers", async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/none', { token: rw });
    expect(r.headers['access-control-allow-origin']).toBeUndefined();
  });
});

describe('responses', () => {
  it('relays a 200 push status from older brokers as is', async () => {
    broker.setOptions({ pushStatus: 200 });
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: push() });
    expect(r.status).toBe(200);
  });

  it('a broker 204 that carries stray bytes is relayed bodiless, and the next request is fine', async () => {
    broker.setOptions({ emptyPopMode: 'no-content-with-body' });
    const conn = await rawTls(Number(new URL(edge.url).port));
    try {
      const a = await conn.exchange(`GET /api/v1/pop/queue/none HTTP/1.1\r\nHost: acme.localhost\r\nAuthorization: Bearer ${rw}\r\n\r\n`);
      expect(a.head).toMatch(/^HTTP\/1\.1 204 /);
      expect(a.head.toLowerCase()).not.toContain('content-length');
      expect(a.rest.length).toBe(0);
      broker.setOptions({ emptyPopMode: 'no-content' });
      for (let i = 0; i < 3; i++) {
        const b = await conn.exchange(
          `POST /api/v1/push HTTP/1.1\r\nHost: acme.localhost\r\nAuthorization: Bearer ${rw}\r\nContent-Type: application/json\r\nContent-Length: 45\r\n\r\n{"items":[{"queue":"fw2","payload":{"i":1}}]}`,
        );
        // Anchored: stray bytes trailing the 204 would sit before this status line.
        expect(b.head).toMatch(/^HTTP\/1\.1 201 /);
      }
    } finally {
      conn.close();
    }
  });

  it("relays the 0.15 broker's empty 200 long-poll answer as it is", async () => {
    broker.setOptions({ emptyPopMode: 'json-200' });
    const r = await call(edge, 'GET', '/api/v1/pop/queue/none?wait=true&timeout=100', { token: rw });
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ messages: [], leaseId: null });
  });
});

describe('connection reuse', () => {
  it('empty pops give their upstream connection back (regression: a paused parser leaked one per 204)', async () => {
    for (let i = 0; i < 20; i++) {
      const r = await call(edge, 'GET', '/api/v1/pop/queue/none', { token: rw });
      expect(r.status).toBe(204);
    }
  });
});

describe('long polls', () => {
  it('caps the client timeout at the maximum before forwarding', async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/idle?wait=true&timeout=999999', { token: rw });
    expect(r.status).toBe(204);
    expect(forwarded(broker).at(-1)!.query.get('timeout')).toBe('2000');
  });

  it('more parked polls than upstream.connections all park at the broker (regression: they queued behind the request pool)', async () => {
    const ac = new AbortController();
    const polls = Array.from({ length: 8 }, (_, i) =>
      request(`${edge.url}/api/v1/pop/queue/many-${i}?wait=true&timeout=2000`, {
        headers: { host: 'acme.localhost', authorization: `Bearer ${rw}` },
        dispatcher: edge.dispatcher,
        signal: ac.signal,
      }).catch((e: Error) => e),
    );
    try {
      await expect.poll(() => broker.parked(), { timeout: 1500, interval: 20 }).toBe(8);
    } finally {
      ac.abort();
      await Promise.all(polls);
    }
  });

  it('a client that disconnects during a parked pop aborts the upstream request at once', async () => {
    const ac = new AbortController();
    const pending = request(`${edge.url}/api/v1/pop/queue/parked?wait=true&timeout=2000`, {
      headers: { host: 'acme.localhost', authorization: `Bearer ${rw}` },
      dispatcher: edge.dispatcher,
      signal: ac.signal,
    }).catch((e: Error) => e);
    await broker.waitForRequests(1, (q) => q.path === '/api/v1/pop/queue/parked');
    expect(broker.parked()).toBe(1);
    ac.abort();
    expect(await pending).toBeInstanceOf(Error);
    // Well before the poll's own 2 s timeout, after which the broker would let it go anyway.
    await waitFor(() => broker.parked() === 0, 1000, 'the broker to see the parked pop aborted');
    const rec = broker.requests.find((q) => q.path === '/api/v1/pop/queue/parked')!;
    await expect.poll(() => rec.aborted, { timeout: 1000 }).toBe(true);
  });
});

describe('upstream failures', () => {
  it('a broker that never answers: 504 upstream_timeout', async () => {
    broker.fault('hang', 1);
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: push() });
    expect(r.status).toBe(504);
    expect(r.json).toEqual({ error: expect.any(String), code: 'upstream_timeout' });
  });

  it('a broker that resets the connection: 502 bad_gateway', async () => {
    broker.fault('reset', 1);
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: push() });
    expect(r.status).toBe(502);
    expect((r.json as { code: string }).code).toBe('bad_gateway');
  });

  it('a broker that answers garbage: 502 bad_gateway', async () => {
    broker.fault('garbage', 1);
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: push() });
    expect(r.status).toBe(502);
  });

  it('a broker that is down: 502 bad_gateway or 503 no_upstream, with a code', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const down = await startEdge(testConfig([`http://127.0.0.1:${port}`]));
    try {
      const r = await call(down, 'POST', '/api/v1/push', { token: rw, body: push() });
      expect([502, 503]).toContain(r.status);
      expect(['bad_gateway', 'no_upstream']).toContain((r.json as { code: string }).code);
    } finally {
      await down.close();
    }
  });
});

describe('upstream identity', () => {
  it('mint: the broker gets a short-lived token signed by the edge with sub, roles and tenant', async () => {
    const minted = await startEdge(
      testConfig([broker.url], { upstreamIdentity: { mode: 'mint', mint: { secret: 'mint-secret-mint-secret-mint-secret!', ttlSec: 60 } } }),
    );
    try {
      await call(minted, 'POST', '/api/v1/push', { token: rw, body: push() });
      const auth = forwarded(broker).at(-1)!.headers.authorization!;
      expect(auth).toMatch(/^Bearer /);
      expect(auth).not.toBe(`Bearer ${rw}`);
      const { payload } = await jwtVerify(auth.slice(7), new TextEncoder().encode('mint-secret-mint-secret-mint-secret!'));
      expect(payload).toMatchObject({ sub: 'svc', roles: ['read-write'], tenant: 'acme', iss: 'queen-edge' });
    } finally {
      await minted.close();
    }
  });

  it('none: no Authorization upstream, and x-queen-tenant when asked', async () => {
    const none = await startEdge(testConfig([broker.url], { upstreamIdentity: { mode: 'none', tenantHeader: true } }));
    try {
      await call(none, 'POST', '/api/v1/push', { token: rw, body: push() });
      const h = forwarded(broker).at(-1)!.headers;
      expect(h.authorization).toBeUndefined();
      expect(h['x-queen-tenant']).toBe('acme');
    } finally {
      await none.close();
    }
  });
});
