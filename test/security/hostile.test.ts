/**
 * Hostile input: property-based and a fixed corpus. Every answer is a documented
 * status with a JSON code, nothing is forwarded that should not be, and the edge keeps serving.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { rawTls } from '../helpers/raw.js';
import { algNoneToken, craftToken, hmacWithPublicKey, keyPair, signWith, tempDir } from '../helpers/tokens.js';

let acme: BrokerDouble;
let globex: BrokerDouble;
let edge: EdgeHarness;
let rw: string;
let rsaPem: string;

/** Paths a broker must never receive from the edge (operator-only and internal). */
const NEVER_FORWARDED =
  /^\/(internal|metrics)(\/|$)|^\/api\/v1\/(system|migration|stats)(\/|$)|^\/api\/v1\/status(\/buffers)?$|^\/api\/v1\/analytics\/(system-metrics|worker-metrics|postgres-stats)$/;
const DOCUMENTED = new Set([400, 401, 403, 404, 413, 429, 502, 503, 504]);

beforeAll(async () => {
  acme = await startBrokerDouble({ name: 'acme' });
  globex = await startBrokerDouble({ name: 'globex' });
  const rsa = await keyPair('RS256');
  rsaPem = rsa.spkiPem;
  const pemPath = await (await tempDir()).write('rs256.pem', rsaPem);
  edge = await startEdge(
    testConfig([acme.url], {
      auth: { publicKey: pemPath },
      tenants: { globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [globex.url] } },
    }),
  );
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  // Sanity: the RS256 key really verifies, so the alg-confusion refusals below are meaningful.
  const good = await signWith(rsa, { roles: ['read-write'], tenant: 'acme', sub: 'x', exp: Math.floor(Date.now() / 1000) + 600 });
  expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: good })).status).toBe(204);
});
afterAll(async () => {
  await edge.close();
  await acme.close();
  await globex.close();
});

function expectDocumentedRefusal(r: { status: number; json: unknown }): void {
  expect(DOCUMENTED.has(r.status), `status ${r.status}`).toBe(true);
  expect(r.json).toEqual({ error: expect.any(String), code: expect.any(String) });
}

describe('paths', () => {
  const segment = fc.oneof(
    fc.constantFrom(
      'api',
      'v1',
      'push',
      'pop',
      'queue',
      'system',
      'internal',
      'metrics',
      'status',
      'buffers',
      'migration',
      '..',
      '.',
      '',
      '%2e%2e',
      '%2E.',
      '%2F',
      '%00',
      '%ff',
      '%',
      'é',
      '%C3%A9',
      'a%2Fb',
      '\u202e',
    ),
    fc.string({ maxLength: 12 }),
  );
  const path = fc.array(segment, { minLength: 1, maxLength: 8 }).map((s) => `/${s.join('/')}`);

  it('random paths never reach a broker unless they normalise to a tenant route, and always get a documented answer', async () => {
    await fc.assert(
      fc.asyncProperty(path, fc.constantFrom('GET', 'POST', 'DELETE'), async (p, method) => {
        const target = encodeURI(p).replace(/%25/g, '%');
        const before = forwarded(acme).length;
        let r: Awaited<ReturnType<typeof call>>;
        try {
          r = await call(edge, method as 'GET', target, { token: rw, body: method === 'POST' ? { items: [] } : undefined });
        } catch (err) {
          // undici refuses to send some targets at all; nothing reached the edge.
          expect(String(err)).toMatch(/invalid|path|character/i);
          return;
        }
        const sent = forwarded(acme).slice(before);
        for (const q of sent) expect(q.path).not.toMatch(NEVER_FORWARDED);
        if (r.status >= 400 && sent.length === 0) expectDocumentedRefusal(r);
      }),
      { numRuns: 150 },
    );
    expect((await call(edge, 'GET', '/health')).status).toBe(200);
  });

  it.each([
    ['/api/v1/push/../system/maintenance', '/api/v1/push/../system/maintenance'],
    ['/api/v1/%2e%2e/v1/system/maintenance', '/api/v1/%2e%2e/v1/system/maintenance'],
    ['/api/v1/./system/../system/x', '/api/v1/./system/../system/x'],
    ['//internal//replay', '//internal//replay'],
    ['/api/v1/pop/../../internal/x', '/api/v1/pop/../../internal/x'],
    ['/metrics/', '/metrics/'],
    ['/api/v1/status/', '/api/v1/status/'],
    ['/api/v1/status/buffers', '/api/v1/status/buffers'],
    ['/api/v1/migration/run', '/api/v1/migration/run'],
    ['3000 segments', `/${'a/'.repeat(3000)}`],
  ])('%s: 404 or 400, not forwarded', async (_label, p) => {
    const before = forwarded(acme).length;
    const r = await call(edge, 'GET', p, { token: rw });
    expect([400, 404]).toContain(r.status);
    expectDocumentedRefusal(r);
    expect(forwarded(acme).length).toBe(before);
  });
});

describe('tokens', () => {
  const claims = { roles: ['read-write'], tenant: 'acme', sub: 's', exp: Math.floor(Date.now() / 1000) + 600 };

  it('fixed corpus of forged and malformed tokens: 401, never forwarded', async () => {
    const forged = [
      algNoneToken(claims),
      hmacWithPublicKey(claims, rsaPem),
      craftToken({ alg: 'HS256', typ: 'JWT' }, claims, 'not-a-signature'),
      craftToken('not json', claims),
      'a.b.c',
      '....',
      'x'.repeat(12000),
      `${craftToken({ alg: 'HS256' }, claims)}.extra`,
      await token({ ...claims, roles: 'read-write' }),
      await token({ ...claims, tenant: 42 }),
      await token({ ...claims, tenant: ['acme', 'globex'] }),
      await token({ ...claims, roles: ['read-write', 1] as unknown as string[] }),
      await token({ ...claims, sub: 'x'.repeat(100) }, 'some-other-secret-some-other-secret'),
    ];
    for (const t of forged) {
      const before = forwarded(acme).length + forwarded(globex).length;
      const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t });
      expect(r.status, t.slice(0, 40)).toBe(401);
      expectDocumentedRefusal(r);
      expect(forwarded(acme).length + forwarded(globex).length).toBe(before);
    }
  });

  it('random bytes as tokens: 401 with a JSON code', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ minLength: 1, maxLength: 300 }).filter((s) => /^[\x21-\x7e]+$/.test(s)),
        async (t) => {
          const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { headers: { authorization: `Bearer ${t}` } });
          expect(r.status).toBe(401);
          expectDocumentedRefusal(r);
        },
      ),
      { numRuns: 100 },
    );
  });

  it('a roles claim of "admin" as a string does not grant admin routes', async () => {
    const t = await token({ roles: 'admin', tenant: 'acme' });
    const r = await call(edge, 'DELETE', '/api/v1/resources/queues/q', { token: t });
    expect([401, 403]).toContain(r.status);
  });
});

describe('cross-tenant', () => {
  it("a valid token of acme never reaches globex's brokers, whatever host or claim is tried", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom('globex.localhost', 'GLOBEX.localhost', 'globex.localhost:443', 'globex.localhost.', ' globex.localhost'),
        async (host) => {
          const before = forwarded(globex).length;
          let status = 0;
          try {
            status = (await call(edge, 'POST', '/api/v1/push', { token: rw, host, body: { items: [{ queue: 'q', payload: 1 }] } })).status;
          } catch {
            status = -1;
          }
          expect(forwarded(globex).length, `host ${JSON.stringify(host)} status ${status}`).toBe(before);
        },
      ),
      { numRuns: 20 },
    );
  });

  it("a token naming globex on acme's host is refused and reaches neither", async () => {
    const t = await token({ roles: ['read-write'], tenant: 'globex' });
    const [a, g] = [forwarded(acme).length, forwarded(globex).length];
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, host: 'acme.localhost' });
    expect(r.status).toBe(403);
    expect([forwarded(acme).length, forwarded(globex).length]).toEqual([a, g]);
  });
});

describe('headers (raw)', () => {
  const port = () => Number(new URL(edge.url).port);
  it.each([
    ['duplicated Host', `GET /health HTTP/1.1\r\nHost: acme.localhost\r\nHost: globex.localhost\r\n\r\n`, [400]],
    [
      'Transfer-Encoding with Content-Length',
      `POST /api/v1/push HTTP/1.1\r\nHost: acme.localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      [400],
    ],
    ['two different Content-Lengths', `POST /api/v1/push HTTP/1.1\r\nHost: acme.localhost\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello`, [400]],
    ['a bare LF inside a header value', `GET /health HTTP/1.1\r\nHost: acme.localhost\r\nX-A: a\nInjected: 1\r\n\r\n`, [400]],
    ['oversize header', `GET /health HTTP/1.1\r\nHost: acme.localhost\r\nX-Big: ${'b'.repeat(20000)}\r\n\r\n`, [431]],
  ])('%s is refused', async (_name, raw, statuses) => {
    const before = forwarded(acme).length;
    const conn = await rawTls(port());
    try {
      const r = await conn.exchange(raw);
      const status = Number(r.head.split(' ')[1]);
      expect(statuses).toContain(status);
    } finally {
      conn.close();
    }
    expect(forwarded(acme).length).toBe(before);
    expect((await call(edge, 'GET', '/health')).status).toBe(200);
  });
});

describe('bodies and queries', () => {
  it.each([
    ['deep nesting', `{"items":[${'['.repeat(5000)}${']'.repeat(5000)}]}`],
    ['items not an array', '{"items":{"0":{"queue":"q","payload":1}}}'],
    ['not JSON', 'queue=q&payload=1'],
    ['a JSON string', '"items"'],
    ['truncated', '{"items":[{"queue":"q","payload":'],
    ['huge array over maxBatch', JSON.stringify({ items: Array.from({ length: 1500 }, () => ({ queue: 'q', payload: 1 })) })],
  ])('push with %s: 400 invalid_request, not forwarded', async (_n, body) => {
    const before = forwarded(acme).length;
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body });
    expect(r.status).toBe(400);
    expect((r.json as { code: string }).code).toBe('invalid_request');
    expect(forwarded(acme).length).toBe(before);
  });

  it('random pop queries: a documented answer, and never an uncapped timeout upstream', async () => {
    const value = fc.oneof(fc.constantFrom('-1', '1e309', '0', 'true', 'false', 'maybe', '', '99999999999', 'NaN', '1.5'), fc.nat().map(String));
    const name = fc.constantFrom('timeout', 'wait', 'batch', 'partitions', 'consumerGroup', 'autoAck');
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(name, value), { maxLength: 5 }), async (pairs) => {
        const q = new URLSearchParams(pairs.map(([k, v]) => [k, v] as [string, string]));
        // Keep any long poll short so the property stays fast (`1` is a long poll too, as the broker reads it).
        const wait = q.get('wait');
        if (wait === 'true' || wait === '1') q.set('timeout', '50');
        const before = forwarded(acme).length;
        const r = await call(edge, 'GET', `/api/v1/pop/queue/props?${q}`, { token: rw });
        const sent = forwarded(acme).slice(before);
        if (sent.length === 0) expectDocumentedRefusal(r);
        for (const s of sent) {
          const t = s.query.get('timeout');
          if (s.query.get('wait') === 'true') expect(Number(t)).toBeLessThanOrEqual(edge.config.server.longPoll.maxTimeoutMs);
        }
      }),
      { numRuns: 100 },
    );
  });
});

describe('memory', () => {
  it('stays bounded over many refused and forwarded requests', async () => {
    const forged = algNoneToken({ roles: ['admin'], tenant: 'acme' });
    const sample = async () => {
      for (let i = 0; i < 300; i++) {
        await call(edge, 'GET', `/api/v1/pop/queue/q${i}`, { token: i % 2 ? rw : forged });
      }
    };
    await sample();
    const base = process.memoryUsage().heapUsed;
    await sample();
    await sample();
    // The token cache and lease map are bounded; 600 more requests must not grow the heap by
    // more than a few MiB (a leak of request contexts or bodies would).
    expect(process.memoryUsage().heapUsed - base).toBeLessThan(32 * 1024 * 1024);
  });
});
