/**
 * The admin API through real sockets: two instances sharing Redis, each route,
 * authentication, body validation, propagation to the other instance, and persistence.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { capturingLogger } from '../helpers/logs.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin } from './admin-call.js';

const prefix = uniquePrefix();
let broker: BrokerDouble;
let a: EdgeHarness;
let b: EdgeHarness;
const captured = capturingLogger('info');
const logLines = captured.lines;

function config(token: string | null = ADMIN_TOKEN) {
  return testConfig([broker.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 200 },
    server: { admin: { token } },
    tenants: { acme: { brokerVersion: 'contract' } },
  });
}

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  a = await startEdge(config(), { log: captured.log });
  b = await startEdge(config());
});

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await broker?.close();
  const r = await connectTest(SHARED_REDIS_URL);
  await flushPrefix(r, prefix);
  r.disconnect();
});

const BETA = {
  plan: 'test',
  hosts: ['beta.localhost'],
  brokers: ['http://127.0.0.1:1'],
  cors: { origins: ['https://beta.example'] },
  limits: { maxBatch: 10 },
};

describe('admin API authentication', () => {
  it('401 unauthorized without a token, with a wrong one, or with another scheme', async () => {
    for (const tok of [null, 'wrong', `${ADMIN_TOKEN}x`, ADMIN_TOKEN.slice(0, -1)]) {
      const r = await admin(a, 'GET', '/admin/v1/tenants', { token: tok });
      expect(r.status).toBe(401);
      expect(r.json).toEqual({ error: 'missing or invalid admin token', code: 'unauthorized' });
    }
    const basic = await call(a, 'GET', '/admin/v1/tenants', { base: a.adminUrl, host: '127.0.0.1', headers: { authorization: `Basic ${ADMIN_TOKEN}` } });
    expect(basic.status).toBe(401);
  });

  it('no admin token configured: /admin/* is 404, probes and /metrics still answer', async () => {
    const off = await startEdge(config(null));
    try {
      expect((await admin(off, 'GET', '/admin/v1/tenants')).status).toBe(404);
      expect((await admin(off, 'GET', '/admin/v1/tenants', { token: null })).json.code).toBe('admin_disabled');
      expect((await admin(off, 'GET', '/livez', { token: null })).status).toBe(200);
      expect((await admin(off, 'GET', '/readyz', { token: null })).status).toBe(200);
      expect((await admin(off, 'GET', '/metrics', { token: null })).status).toBe(200);
    } finally {
      await off.close();
    }
  });
});

describe('admin API routes', () => {
  it('GET /admin/v1/tenants lists the tenants; GET one shows its record', async () => {
    const list = await admin(a, 'GET', '/admin/v1/tenants');
    expect(list.status).toBe(200);
    expect(list.json.tenants.map((t: { id: string }) => t.id)).toContain('acme');
    const one = await admin(a, 'GET', '/admin/v1/tenants/acme');
    expect(one.json).toMatchObject({
      id: 'acme',
      status: 'active',
      plan: 'test',
      hosts: ['acme.localhost'],
      cors: { origins: ['https://app.example.com', 'https://*.acme.dev'] },
      limits: {},
    });
    expect((await admin(a, 'GET', '/admin/v1/tenants/nope')).status).toBe(404);
  });

  it('PUT a tenant: visible on the other instance, logged with the token id, kept across a restart; DELETE removes it', async () => {
    const put = await admin(a, 'PUT', '/admin/v1/tenants/beta', { body: BETA });
    expect(put.status).toBe(200);
    expect(put.json).toMatchObject({ id: 'beta', cors: { origins: ['https://beta.example'] }, limits: { maxBatch: 10 }, effectiveLimits: { maxBatch: 10 } });
    await waitFor(async () => (await admin(b, 'GET', '/admin/v1/tenants/beta')).status === 200, 1000, 'beta on the other instance');
    const change = logLines.find((l) => l.msg === 'admin change' && l.action === 'tenant.put');
    expect(change).toMatchObject({ target: 'beta', admin: expect.stringMatching(/^[0-9a-f]{8}$/) });
    expect(JSON.stringify(logLines)).not.toContain(ADMIN_TOKEN);

    const restarted = await startEdge(config());
    try {
      expect((await admin(restarted, 'GET', '/admin/v1/tenants/beta')).json.hosts).toEqual(['beta.localhost']);
    } finally {
      await restarted.close();
    }
    expect((await admin(a, 'DELETE', '/admin/v1/tenants/beta')).status).toBe(204);
    expect((await admin(a, 'DELETE', '/admin/v1/tenants/beta')).status).toBe(404);
    await waitFor(async () => (await admin(b, 'GET', '/admin/v1/tenants/beta')).status === 404, 1000, 'beta gone on the other instance');
  });

  it('bad bodies: 400 invalid_request naming the field', async () => {
    const cases: Array<[string, string, unknown, string]> = [
      ['PUT', '/admin/v1/tenants/beta', { ...BETA, brokers: 'x' }, 'brokers'],
      ['PUT', '/admin/v1/tenants/beta', { ...BETA, plan: 'gold' }, 'plan'],
      ['PUT', '/admin/v1/tenants/beta', { ...BETA, colour: 'red' }, 'colour'],
      ['PUT', '/admin/v1/tenants/beta', '{"plan":', 'malformed JSON'],
      ['PUT', '/admin/v1/plans/gold', { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 'fast' } }, 'limits.requestsPerSec'],
      ['PUT', '/admin/v1/plans/gold', { quotas: TEST_PLAN.quotas, storageBytes: 1 }, 'limits'],
      ['PUT', '/admin/v1/tenants/acme/storage', { usedBytes: -1 }, 'usedBytes'],
      ['PUT', '/admin/v1/tenants/acme/storage', { bytes: 5 }, 'usedBytes'],
    ];
    for (const [method, path, body, field] of cases) {
      const r = await admin(a, method as 'PUT', path, { body });
      expect(r.status, `${path} ${JSON.stringify(body)}`).toBe(400);
      expect(r.json.code).toBe('invalid_request');
      expect(r.json.error).toContain(field);
    }
    expect((await admin(a, 'GET', '/admin/v1/tenants/acme/usage?granularity=week')).json.error).toContain('granularity');
    expect((await admin(a, 'GET', '/admin/v1/tenants/acme/usage?from=yesterday')).json.error).toContain('from');
  });

  it('a plan change applies to the next request on the other instance (feature gate)', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    expect((await call(b, 'GET', '/api/v1/kv/k1', { token: tok })).json).toMatchObject({ code: 'feature_gated' });
    expect((await admin(a, 'GET', '/admin/v1/plans/test')).json).toMatchObject({ id: 'test', features: [] });
    const put = await admin(a, 'PUT', '/admin/v1/plans/test', { body: { ...TEST_PLAN, features: ['kv'] } });
    expect(put.status).toBe(200);
    expect(put.json.features).toEqual(['kv']);
    await waitFor(
      async () => ((await call(b, 'GET', '/api/v1/kv/k1', { token: tok })).json as { code?: string } | undefined)?.code !== 'feature_gated',
      1000,
      'kv allowed on the other instance',
    );
    expect(forwarded(broker).some((r) => r.path === '/api/v1/kv/k1')).toBe(true);
    await admin(a, 'PUT', '/admin/v1/plans/test', { body: TEST_PLAN });
    expect((await admin(a, 'GET', '/admin/v1/plans/none')).status).toBe(404);
  });

  it("a plan's trace sampling ratio is written, shown, and checked", async () => {
    const put = await admin(a, 'PUT', '/admin/v1/plans/traced', { body: { ...TEST_PLAN, traceRatio: 0.5 } });
    expect(put.status).toBe(200);
    expect((await admin(a, 'GET', '/admin/v1/plans/traced')).json).toMatchObject({ id: 'traced', traceRatio: 0.5 });
    expect((await admin(a, 'GET', '/admin/v1/plans/test')).json.traceRatio).toBeUndefined();
    const bad = await admin(a, 'PUT', '/admin/v1/plans/traced', { body: { ...TEST_PLAN, traceRatio: 2 } });
    expect(bad.status).toBe(400);
  });

  it('suspend and resume reach the other instance within a second', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const s = await admin(a, 'POST', '/admin/v1/tenants/acme/suspend');
    expect(s.json.status).toBe('suspended');
    await waitFor(
      async () => ((await call(b, 'GET', '/api/v1/pop/queue/q', { token: tok })).json as { code?: string } | undefined)?.code === 'cluster_suspended',
      1000,
      'suspended on b',
    );
    expect((await admin(a, 'POST', '/admin/v1/tenants/acme/resume')).json.status).toBe('active');
    await waitFor(async () => (await call(b, 'GET', '/api/v1/pop/queue/q', { token: tok })).status === 204, 1000, 'resumed on b');
    expect((await admin(a, 'POST', '/admin/v1/tenants/nope/suspend')).status).toBe(404);
  });

  it('PUT storage feeds the storage gate on every instance', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await admin(a, 'PUT', '/admin/v1/tenants/acme/storage', { body: { usedBytes: TEST_PLAN.storageBytes * 2 } });
    expect(r.json.storage).toEqual({ usedBytes: TEST_PLAN.storageBytes * 2, blocked: true });
    await waitFor(
      async () =>
        ((await call(b, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: 1 }] } })).json as { code?: string } | undefined)?.code ===
        'storage_quota_exceeded',
      1000,
      'blocked on b',
    );
    await admin(a, 'PUT', '/admin/v1/tenants/acme/storage', { body: { usedBytes: 0 } });
  });

  it('GET usage and GET brokers', async () => {
    const u = await admin(a, 'GET', '/admin/v1/tenants/acme/usage?from=2020-01-01T00:00:00Z&to=2020-02-01T00:00:00Z&granularity=month');
    expect(u.json).toMatchObject({ tenant: 'acme', granularity: 'month', buckets: [], total: { requests: 0 } });
    // A page of tenants' totals in one call (the console's Tenants page).
    const all = await admin(a, 'GET', '/admin/v1/usage?from=2020-01-01T00:00:00Z&to=2020-02-01T00:00:00Z');
    expect(all.json).toEqual({
      from: '2020-01-01T00:00:00.000Z',
      to: '2020-02-01T00:00:00.000Z',
      tenants: [{ tenant: 'acme', total: u.json.total }],
      next: null,
    });
    expect((await admin(a, 'GET', '/admin/v1/usage?from=2020-02-01T00:00:00Z&to=2020-01-01T00:00:00Z')).json.code).toBe('invalid_request');
    const brokers = await admin(a, 'GET', '/admin/v1/brokers');
    expect(brokers.json.clusters).toEqual([
      expect.objectContaining({ tenant: 'acme', brokers: [expect.objectContaining({ url: broker.url, healthy: true })] }),
    ]);
    expect((await admin(a, 'GET', '/admin/v1/nothing')).status).toBe(404);
  });
});
