/** CORS at the edge (docs/architecture.md): preflights before auth, per-tenant origins, broker headers replaced. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ cors: true });
  edge = await startEdge(testConfig([broker.url]));
});
afterAll(async () => {
  await edge.close();
  await broker.close();
});

const preflight = (origin: string, method = 'POST', headers = 'authorization, content-type') =>
  call(edge, 'OPTIONS', '/api/v1/push', { headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': headers } });

describe('CORS', () => {
  it('answers an allowed preflight at the edge without a token', async () => {
    const before = forwarded(broker).length;
    const r = await preflight('https://app.example.com');
    expect(r.status).toBe(204);
    expect(r.headers['access-control-allow-origin']).toBe('https://app.example.com');
    expect(r.headers['access-control-allow-methods']).toContain('POST');
    expect(r.headers['access-control-allow-headers']).toBe('authorization, content-type');
    expect(r.headers['access-control-max-age']).toBe('600');
    expect(String(r.headers.vary)).toContain('Origin');
    expect(forwarded(broker).length).toBe(before);
  });

  it('allows a wildcard subdomain, refuses the apex and other origins with 403 forbidden', async () => {
    expect((await preflight('https://eu.acme.dev')).status).toBe(204);
    const apex = await preflight('https://acme.dev');
    expect(apex.status).toBe(403);
    expect(apex.json).toEqual({ error: expect.any(String), code: 'forbidden' });
    expect((await preflight('https://evil.example')).status).toBe(403);
  });

  it("an actual request from an allowed origin gets the edge's CORS headers, not the broker's *", async () => {
    const t = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await call(edge, 'POST', '/api/v1/push', {
      token: t,
      headers: { origin: 'https://app.example.com' },
      body: { items: [{ queue: 'c', payload: 1 }] },
    });
    expect(r.status).toBe(201);
    expect(r.headers['access-control-allow-origin']).toBe('https://app.example.com');
    expect(r.headers['access-control-expose-headers']).toBe('Retry-After, RateLimit, RateLimit-Policy, X-Request-Id');
    expect(r.headers.vary).toBe('Origin');
  });

  it('refusals carry the CORS headers too, so the browser can read the code', async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { headers: { origin: 'https://app.example.com' } });
    expect(r.status).toBe(401);
    expect(r.headers['access-control-allow-origin']).toBe('https://app.example.com');
  });

  it('an actual request from a refused origin is 403 and never forwarded', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'acme' });
    const before = forwarded(broker).length;
    const r = await call(edge, 'POST', '/api/v1/push', { token: t, headers: { origin: 'https://evil.example' }, body: { items: [] } });
    expect(r.status).toBe(403);
    expect(forwarded(broker).length).toBe(before);
  });
});
