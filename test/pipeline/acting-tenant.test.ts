/**
 * On a host no tenant lists, the token picks the tenant: its CORS policy, not the default
 * tenant's, decides the actual request (docs/browser.md); and a Host or :authority longer than any
 * DNS name is a 400 before anything looks it up.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, h2Session, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';

let open: BrokerDouble;
let strict: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  [open, strict] = await Promise.all([startBrokerDouble({ name: 'open' }), startBrokerDouble({ name: 'strict' })]);
  edge = await startEdge(
    testConfig([open.url], {
      auth: { defaultTenant: 'acme' },
      tenants: {
        // The default tenant allows a broad origin; `strict` allows only its own app.
        acme: { cors: { origins: ['https://*.partner.example', 'https://app.strict.example'] } },
        strict: { plan: 'test', hosts: ['strict.localhost'], brokers: [strict.url], cors: { origins: ['https://app.strict.example'] } },
      },
    }),
  );
});
afterAll(async () => {
  await edge.close();
  await Promise.all([open.close(), strict.close()]);
});

describe('CORS of the tenant the token acts for', () => {
  const unlisted = ['127.0.0.1', 'anything.localhost'];

  it('on a host no tenant lists, an origin the acting tenant does not allow is 403 without CORS headers, and never forwarded', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'strict' });
    for (const host of unlisted) {
      const before = forwarded(strict).length;
      const r = await call(edge, 'POST', '/api/v1/push', {
        host,
        token: t,
        headers: { origin: 'https://evil.partner.example' },
        body: { items: [{ queue: 'q', payload: 1 }] },
      });
      expect(r.status).toBe(403);
      expect(r.json).toEqual({ error: 'origin not allowed', code: 'forbidden' });
      expect(r.headers['access-control-allow-origin']).toBeUndefined();
      expect(forwarded(strict).length).toBe(before);
    }
  });

  it("the same origin still reaches the default tenant there, and the acting tenant's own origin its tenant", async () => {
    const own = await call(edge, 'POST', '/api/v1/push', {
      host: '127.0.0.1',
      token: await token({ roles: ['read-write'], tenant: 'strict' }),
      headers: { origin: 'https://app.strict.example' },
      body: { items: [{ queue: 'q', payload: 1 }] },
    });
    expect(own.status).toBe(201);
    expect(own.headers['access-control-allow-origin']).toBe('https://app.strict.example');
    expect(forwarded(strict).at(-1)?.path).toBe('/api/v1/push');
    const dflt = await call(edge, 'GET', '/api/v1/pop/queue/q', {
      host: '127.0.0.1',
      token: await token({ roles: ['read-write'], tenant: 'acme' }),
      headers: { origin: 'https://evil.partner.example' },
    });
    expect(dflt.status).toBe(204);
    expect(dflt.headers['access-control-allow-origin']).toBe('https://evil.partner.example');
  });

  it("the preflight on such a host is the default tenant's: it carries no token to tell otherwise", async () => {
    const r = await call(edge, 'OPTIONS', '/api/v1/push', {
      host: '127.0.0.1',
      headers: { origin: 'https://evil.partner.example', 'access-control-request-method': 'POST' },
    });
    expect(r.status).toBe(204);
  });
});

describe('host name length', () => {
  const t = token({ roles: ['read-write'], tenant: 'acme' });

  it("a Host longer than 253 characters is 400 invalid_request, not resolved by the token's claim", async () => {
    const long = `${'a'.repeat(63)}.`.repeat(4).slice(0, 254);
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { host: `${long}:8443`, token: await t });
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ error: 'host name longer than 253 characters', code: 'invalid_request' });
    const huge = await call(edge, 'GET', '/api/v1/pop/queue/q', { host: 'h'.repeat(12_000), token: await t });
    expect(huge.status).toBe(400);
    // 253 characters, and 253 plus the trailing dot of a fully qualified name, are names.
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { host: long.slice(0, 253), token: await t })).status).toBe(204);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { host: `${long.slice(0, 253)}.`, token: await t })).status).toBe(204);
  });

  it('the same over h2 (:authority)', async () => {
    const session = await h2Session(edge.url);
    try {
      const stream = session.request({ ':method': 'GET', ':path': '/api/v1/pop/queue/q', ':authority': 'x'.repeat(300), authorization: `Bearer ${await t}` });
      const status = await new Promise<number>((resolve, reject) => {
        stream.once('response', (h) => resolve(Number(h[':status'])));
        stream.once('error', reject);
      });
      let body = '';
      stream.setEncoding('utf8');
      stream.on('data', (c: string) => (body += c));
      await waitForEvent(stream, 'end', 5000, 'the end of the answer');
      expect(status).toBe(400);
      expect(JSON.parse(body)).toMatchObject({ code: 'invalid_request' });
    } finally {
      session.close();
    }
  });
});
