/**
 * A key belongs to one incarnation of its tenant, and a missed revocation is caught by the
 * revocation check: two edges on one Redis, tenants removed by a file reload and by the admin API,
 * a revocation whose message never arrives.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { apiKeyKeys } from '../../src/redis/keys.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { PrivateRedis, SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { admin, ADMIN_TOKEN, metric } from '../admin/admin-call.js';

const prefix = uniquePrefix();
let broker: BrokerDouble;
let a: EdgeHarness;
let b: EdgeHarness;
let redis: Redis;

const PUSH = { items: [{ queue: 'q', partition: 'p', payload: { n: 1 } }] };

function config(tenants: Record<string, unknown>): RawConfig {
  return testConfig([broker.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
    server: { admin: { token: ADMIN_TOKEN } },
    tenants: { acme: { tenancyAwareBrokers: true }, ...tenants },
  });
}

const tenantOn = (host: string) => ({ plan: 'test', hosts: [host], brokers: [broker.url], tenancyAwareBrokers: true });

async function push(h: EdgeHarness, key: string, host: string): Promise<number> {
  return (await call(h, 'POST', '/api/v1/push', { token: key, body: PUSH, host })).status;
}

async function createKey(h: EdgeHarness, tenant: string): Promise<{ id: string; key: string }> {
  const r = await admin(h, 'POST', `/admin/v1/tenants/${tenant}/keys`, { body: { name: 'k', roles: ['read-write'] } });
  expect(r.status).toBe(201);
  return r.json;
}

beforeAll(async () => {
  broker = await startBrokerDouble({ pushStatus: 201 });
  redis = await connectTest(SHARED_REDIS_URL);
  const withB = config({ b: tenantOn('b.localhost') });
  [a, b] = await Promise.all([startEdge(withB), startEdge(withB)]);
});

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await broker?.close();
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

describe('a key dies with its tenant', () => {
  it('a tenant removed from the file by a reload takes its keys: added back (a new customer), the old key is refused on both edges', async () => {
    const { key } = await createKey(a, 'b');
    for (const h of [a, b]) expect(await push(h, key, 'b.localhost')).toBe(201);
    await Promise.all([a.app.reload(config({})), b.app.reload(config({}))]);
    // Refused as a key at once (before, its host's missing tenant answered 403).
    for (const h of [a, b]) expect(await push(h, key, 'b.localhost')).toBe(401);
    // Its keys are gone from the shared records, not only from these caches.
    await waitFor(async () => (await redis.smembers(apiKeyKeys(prefix).tenant('b'))).length === 0, 5000, "b's keys revoked in Redis");
    await Promise.all([a.app.reload(config({ b: tenantOn('b2.localhost') })), b.app.reload(config({ b: tenantOn('b2.localhost') }))]);
    for (const h of [a, b]) expect(await push(h, key, 'b2.localhost')).toBe(401);
    expect((await admin(a, 'GET', '/admin/v1/tenants/b/keys')).json.keys).toEqual([]);
    // The new incarnation's own keys work.
    const fresh = await createKey(b, 'b');
    for (const h of [a, b]) expect(await push(h, fresh.key, 'b2.localhost')).toBe(201);
  });

  it('a reload on one edge alone revokes for both: the other edge, still serving the tenant, refuses its keys', async () => {
    await Promise.all([a.app.reload(config({ c: tenantOn('c.localhost') })), b.app.reload(config({ c: tenantOn('c.localhost') }))]);
    const { key } = await createKey(a, 'c');
    expect(await push(b, key, 'c.localhost')).toBe(201);
    await a.app.reload(config({}));
    await waitFor(async () => (await push(b, key, 'c.localhost')) === 401, 10_000, "c's key refused on the edge that still lists c");
  });

  it('a tenant deleted through the admin API and created again under its id starts with none, on both edges', async () => {
    expect((await admin(a, 'PUT', '/admin/v1/tenants/d', { body: tenantOn('d.localhost') })).status).toBe(200);
    const { key } = await createKey(a, 'd');
    await waitFor(async () => (await push(b, key, 'd.localhost')) === 201, 5000, 'the key served on b');
    expect((await admin(b, 'DELETE', '/admin/v1/tenants/d')).status).toBe(204);
    expect((await admin(a, 'PUT', '/admin/v1/tenants/d', { body: tenantOn('d2.localhost') })).status).toBe(200);
    for (const h of [a, b]) await waitFor(async () => (await push(h, key, 'd2.localhost')) === 401, 5000, "the former d's key refused");
  });
});

describe('a missed revocation', () => {
  it('is caught by the revocation check within its period: a revoke whose message never arrives', async () => {
    const { id, key } = await createKey(a, 'acme');
    for (const h of [a, b]) expect(await push(h, key, 'acme.localhost')).toBe(201);
    // A revocation as another instance writes it, its pub/sub message lost on the way.
    const k = apiKeyKeys(prefix);
    await redis.multi().del(k.key(id)).srem(k.tenant('acme'), id).incr(k.revocations).exec();
    const revoked = Date.now();
    // The check runs every 5 s; a generous wait, far below the 30 s a cache entry lives.
    for (const h of [a, b]) await waitFor(async () => (await push(h, key, 'acme.localhost')) === 401, 12_000, 'the revoked key refused');
    expect(Date.now() - revoked).toBeLessThan(12_000);
  });

  it('/metrics tells how old the last revocation check is', async () => {
    await waitFor(async () => (await metric(a, 'queen_edge_api_key_revocation_check_age_seconds')) < 10, 12_000, 'a recent check');
  });
});

describe('with Redis away', () => {
  let priv: PrivateRedis;
  let edge: EdgeHarness;
  let privRedis: Redis;
  const privPrefix = uniquePrefix();
  const privConfig = (tenants: Record<string, unknown>) =>
    testConfig([broker.url], {
      redis: { url: priv.url, keyPrefix: privPrefix, timeoutMs: 300, failMode: 'open' },
      server: { admin: { token: ADMIN_TOKEN } },
      tenants: { acme: { tenancyAwareBrokers: true }, ...tenants },
    });
  beforeAll(async () => {
    priv = await PrivateRedis.start();
    privRedis = await connectTest(priv.url, 2000);
  });
  afterAll(async () => {
    priv?.resume();
    await edge?.close();
    privRedis?.disconnect();
    await priv?.kill();
  });

  it('a tenant removed while its revocation cannot be written: its former keys stay refused when the id comes back, and are revoked once Redis answers', async () => {
    edge = await startEdge(privConfig({ e: tenantOn('e.localhost') }));
    const { key } = await createKey(edge, 'e');
    expect(await push(edge, key, 'e.localhost')).toBe(201);
    priv.pause();
    await edge.app.reload(privConfig({}));
    await edge.app.reload(privConfig({ e: tenantOn('e2.localhost') }));
    // The key is still in this instance's cache (30 s) and in Redis: refused all the same.
    expect(await push(edge, key, 'e2.localhost')).toBe(401);
    // Meanwhile /metrics says how long revocations have gone unchecked.
    await waitFor(async () => (await metric(edge, 'queen_edge_api_key_revocation_check_age_seconds')) > 5, 15_000, 'the check age past its period');
    priv.resume();
    await waitFor(async () => (await privRedis.smembers(apiKeyKeys(privPrefix).tenant('e'))).length === 0, 10_000, "e's former keys revoked in Redis");
    expect(await push(edge, key, 'e2.localhost')).toBe(401);
    const fresh = await createKey(edge, 'e');
    expect(await push(edge, fresh.key, 'e2.localhost')).toBe(201);
  }, 40_000);
});
