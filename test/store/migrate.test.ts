/**
 * `queen-edge migrate`: what an edge without a store wrote to Redis (a tenant of its own, a
 * suspension, a storage figure, a deleted file tenant, a plan, an API key, usage) is copied into
 * the store, a second run copies nothing, and an edge on the store alone (a fresh Redis prefix)
 * serves it all.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { COPY_STEPS, migrateToStore } from '../../src/admin/migrate.js';
import { silentLogger } from '../../src/observability/log.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';
import { edgeTracker } from '../deploy/edge-process.js';

const prefix = uniquePrefix();
const freshPrefix = uniquePrefix();
const target = uniqueStore();
const edges = edgeTracker();
let broker: BrokerDouble;
let redis: Redis;
let redisOnly: RawConfig;
let withStore: RawConfig;
let betaKey: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  redis = await connectTest(SHARED_REDIS_URL);
  const shared = { plan: 'test', brokers: [broker.url], tenancyAwareBrokers: true };
  redisOnly = testConfig([broker.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
    server: { admin: { token: ADMIN_TOKEN } },
    tenants: { acme: { tenancyAwareBrokers: true }, old: { ...shared, hosts: ['old.localhost'] } },
  });
  withStore = { ...redisOnly, store: { ...redisOnly.store, url: target.url, schema: target.schema } };
  const edge = await startEdge(redisOnly);
  try {
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/beta', { body: { ...shared, hosts: ['beta.localhost'] } })).status).toBe(200);
    const created = await admin(edge, 'POST', '/admin/v1/tenants/beta/keys', { body: { name: 'producer', roles: ['read-write'] } });
    expect(created.status).toBe(201);
    betaKey = created.json.key;
    for (let i = 0; i < 3; i++) expect((await pushAsBeta(edge)).status).toBe(201);
    expect((await admin(edge, 'POST', '/admin/v1/tenants/acme/suspend')).status).toBe(200);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/acme/storage', { body: { usedBytes: 1234 } })).status).toBe(200);
    expect((await admin(edge, 'DELETE', '/admin/v1/tenants/old')).status).toBe(204);
    expect((await admin(edge, 'PUT', '/admin/v1/plans/gold', { body: { ...TEST_PLAN, features: ['kv'] } })).status).toBe(200);
  } finally {
    await edge.close();
  }
});

function pushAsBeta(edge: EdgeHarness) {
  return call(edge, 'POST', '/api/v1/push', {
    headers: { authorization: `Bearer ${betaKey}`, host: 'beta.localhost' },
    body: { items: [{ queue: 'q', payload: 1 }] },
  });
}

async function betaRequests(edge: EdgeHarness): Promise<number> {
  const res = await admin(edge, 'GET', '/admin/v1/usage/export?granularity=day&format=jsonl&tenant=beta');
  expect(res.status).toBe(200);
  return res.text
    .split('\n')
    .filter((l) => l !== '')
    .reduce((n, l) => n + (JSON.parse(l) as { requests: number }).requests, 0);
}

afterAll(async () => {
  await edges.cleanup();
  await broker?.close();
  await flushPrefix(redis, prefix);
  await flushPrefix(redis, freshPrefix);
  redis.disconnect();
  await dropStore(target);
});

describe('queen-edge migrate', { timeout: 60_000 }, () => {
  it('the CLI copies every record, one line per step; a second run copies nothing', async () => {
    const first = await edges.start(withStore, ['migrate', '--config', '{config}']);
    expect((await first.exited).code).toBe(0);
    // beta, acme (status and storage), old (its tombstone); the plan.
    const msgs = first.lines.map((l) => l.msg);
    expect(msgs).toContain('tenant and plan records: 4 copied, 0 already in the store, 0 kept as the store has them');
    expect(msgs).toContain('API keys: 1 copied, 0 already in the store, 0 kept as the store has them');
    // beta's three pushes, in the hour they were made.
    expect(msgs).toContain('usage hours: 1 copied, 0 already in the store, 0 kept as the store has them');
    expect(await migrateToStore(withStore, silentLogger())).toEqual([
      { step: 'tenant and plan records', copied: 0, same: 4, kept: 0 },
      { step: 'API keys', copied: 0, same: 0, kept: 1 },
      { step: 'usage hours', copied: 0, same: 0, kept: 0 },
    ]);
  });

  it('an edge on the store (and an empty Redis prefix) serves what was copied', async () => {
    let edge: EdgeHarness | null = null;
    try {
      edge = await startEdge({ ...withStore, redis: { ...withStore.redis, keyPrefix: freshPrefix } });
      expect((await admin(edge, 'GET', '/admin/v1/tenants/beta')).status).toBe(200);
      expect((await admin(edge, 'GET', '/admin/v1/tenants/old')).status).toBe(404);
      const acme = (await admin(edge, 'GET', '/admin/v1/tenants/acme')).json;
      expect(acme).toMatchObject({ status: 'suspended', storage: { usedBytes: 1234 } });
      expect((await admin(edge, 'GET', '/admin/v1/plans/gold')).json.features).toEqual(['kv']);
      const push = await call(edge, 'POST', '/api/v1/push', {
        token: await token({ roles: ['read-write'], tenant: 'acme' }),
        body: { items: [{ queue: 'q', payload: 1 }] },
      });
      expect(push.json).toMatchObject({ code: 'cluster_suspended' });
      // The three counted before the move are in the ledger, and the key still works.
      expect(await betaRequests(edge)).toBe(3);
      expect((await pushAsBeta(edge)).status).toBe(201);
    } finally {
      await edge?.close();
    }
  });

  it('refuses, exit 2, without store.url; the steps are a list the other record kinds join', async () => {
    const run = await edges.start(redisOnly, ['migrate', '--config', '{config}']);
    expect((await run.exited).code).toBe(2);
    expect(run.stderr()).toContain('queen-edge migrate: store.url is not set');
    expect(COPY_STEPS.map((s) => s.name)).toEqual(['tenant and plan records', 'API keys', 'usage hours']);
  });
});
