/** Bad input gets a clear JSON error, nothing is forwarded, and the process keeps serving. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { rawTls } from '../helpers/raw.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(testConfig([broker.url]));
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
});
afterAll(async () => {
  await edge.close();
  await broker.close();
});

function codeOf(r: { json: unknown }): string | undefined {
  return (r.json as { code?: string } | undefined)?.code;
}

describe('bad input', () => {
  it('malformed JSON on push: 400 invalid_request with the parser message, not forwarded', async () => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: '{"items": [' });
    expect(r.status).toBe(400);
    expect(codeOf(r)).toBe('invalid_request');
    expect((r.json as { error: string }).error).toMatch(/JSON/);
    expect(forwarded(broker).length).toBe(before);
  });

  it('a body 2 MiB over the plan limit: 413 payload_too_large', async () => {
    const big = JSON.stringify({ items: [{ queue: 'q', payload: 'x'.repeat(3 * 1024 * 1024) }] });
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: big });
    expect(r.status).toBe(413);
    expect(codeOf(r)).toBe('payload_too_large');
  });

  it('a chunked body over the limit is cut at the limit: 413', async () => {
    async function* chunks() {
      for (let i = 0; i < 40; i++) yield Buffer.alloc(64 * 1024, 0x61);
    }
    const res = await request(`${edge.url}/api/v1/push`, {
      method: 'POST',
      headers: { host: 'acme.localhost', authorization: `Bearer ${rw}`, 'content-type': 'application/json' },
      body: Readable.from(chunks()),
      dispatcher: edge.dispatcher,
    });
    expect(res.statusCode).toBe(413);
    await res.body.dump();
  });

  it('unknown route: 404 route_not_found', async () => {
    const r = await call(edge, 'GET', '/api/v2/whatever', { token: rw });
    expect(r.status).toBe(404);
    expect(codeOf(r)).toBe('route_not_found');
  });

  it.each(['/api/v1/push/../system/maintenance', '/api/v1/%2e%2e/v1/system/maintenance', '/internal/replay', '/metrics', '/api/v1/status'])(
    '%s: 404 and never forwarded',
    async (path) => {
      const before = forwarded(broker).length;
      const r = await call(edge, 'POST', path, { token: rw, body: {} });
      expect(r.status).toBe(404);
      expect(codeOf(r)).toBe('route_not_found');
      expect(forwarded(broker).length).toBe(before);
    },
  );

  it('duplicate Authorization headers: 401', async () => {
    const conn = await rawTls(Number(new URL(edge.url).port));
    try {
      const r = await conn.exchange(
        `GET /api/v1/pop/queue/q HTTP/1.1\r\nHost: acme.localhost\r\nAuthorization: Bearer ${rw}\r\nAuthorization: Bearer ${rw}\r\n\r\n`,
      );
      expect(r.head).toMatch(/^HTTP\/1\.1 401 /);
    } finally {
      conn.close();
    }
  });

  it('a huge header: 431 from Node, and the edge still serves', async () => {
    const conn = await rawTls(Number(new URL(edge.url).port));
    try {
      const r = await conn.exchange(`GET /health HTTP/1.1\r\nHost: acme.localhost\r\nX-Big: ${'a'.repeat(40000)}\r\n\r\n`);
      expect(r.head).toMatch(/^HTTP\/1\.1 431 /);
    } finally {
      conn.close();
    }
    expect((await call(edge, 'GET', '/health')).status).toBe(200);
  });

  it('bad pop query values: 400 invalid_request', async () => {
    for (const q of ['batch=0', 'wait=true&wait=1', 'timeout=-1&wait=true', 'batch=100000']) {
      const r = await call(edge, 'GET', `/api/v1/pop/queue/q?${q}`, { token: rw });
      expect([r.status, codeOf(r)]).toEqual([400, 'invalid_request']);
    }
  });
});
