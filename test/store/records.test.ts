/**
 * Tenant records in the durable store: two edges on one Redis and one store see each other's
 * admin writes, and a Redis that comes back empty loses no tenant and no suspension, for the edges
 * running and for one started afterwards.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';
import { PrivateRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';
import type { RawConfig } from '../../src/config/schema.js';
import { Store } from '../../src/store/connection.js';
import { silentLogger } from '../../src/observability/log.js';

const target = uniqueStore();
let broker: BrokerDouble;
let redis: PrivateRedis;
let config: RawConfig;
let a: EdgeHarness;
let b: EdgeHarness;

const tenant = (id: string) => ({ plan: 'test', hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true });

beforeAll(async () => {
  [broker, redis] = await Promise.all([startBrokerDouble(), PrivateRedis.start()]);
  config = testConfig([broker.url], {
    redis: { url: redis.url, keyPrefix: 'qe:', timeoutMs: 1000 },
    store: { url: target.url, schema: target.schema },
    server: { admin: { token: ADMIN_TOKEN } },
    tenants: { acme: { tenancyAwareBrokers: true }, gamma: tenant('gamma') },
  });
  a = await startEdge(config);
  b = await startEdge(config);
});

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await Promise.all([broker?.close(), redis?.kill()]);
  await dropStore(target);
});

const push = async (h: EdgeHarness, id: string) =>
  call(h, 'POST', '/api/v1/push', {
    host: `${id}.localhost`,
    token: await token({ roles: ['read-write'], tenant: id }),
    body: { items: [{ queue: 'q', payload: 1 }] },
  });

describe('tenant records in the store', () => {
  it('an admin write on one edge reaches the other, and is in the store with its change', async () => {
    expect((await admin(a, 'PUT', '/admin/v1/tenants/beta', { body: tenant('beta') })).status).toBe(200);
    await waitFor(async () => (await admin(b, 'GET', '/admin/v1/tenants/beta')).status === 200, 3000, 'beta on b');
    expect((await admin(b, 'POST', '/admin/v1/tenants/gamma/suspend')).status).toBe(200);
    await waitFor(async () => (await push(a, 'gamma')).status === 403, 3000, 'gamma suspended on a');
    expect((await push(b, 'beta')).status).toBe(201);

    const store = new Store(target, silentLogger());
    try {
      const rows = await store.query('SELECT id, status, record IS NOT NULL AS has_record FROM tenant_records ORDER BY id');
      expect(rows).toEqual([
        { id: 'beta', status: null, has_record: true },
        { id: 'gamma', status: 'suspended', has_record: false },
      ]);
      const log = await store.query('SELECT subject, action FROM change_log ORDER BY seq');
      expect(log).toEqual([
        { subject: 'tenant:beta', action: 'put' },
        { subject: 'tenant:gamma', action: 'suspend' },
      ]);
    } finally {
      await store.close();
    }
  });

  it('Redis killed and started empty: beta is still served, gamma still refused, on the running edges and on a new one', async () => {
    await redis.kill();
    // While Redis is away the records come from memory (limits from failMode local).
    expect((await push(a, 'gamma')).json).toMatchObject({ code: 'cluster_suspended' });
    expect((await admin(b, 'GET', '/admin/v1/tenants/beta')).status).toBe(200);
    await redis.restart();
    for (const h of [a, b]) {
      expect((await admin(h, 'GET', '/admin/v1/tenants/beta')).status).toBe(200);
      expect((await push(h, 'gamma')).status).toBe(403);
    }
    await waitFor(async () => (await push(a, 'beta')).status === 201, 5000, 'beta served once Redis is back');
    const c = await startEdge(config);
    try {
      expect((await admin(c, 'GET', '/admin/v1/tenants/beta')).status).toBe(200);
      expect((await push(c, 'gamma')).json).toMatchObject({ code: 'cluster_suspended' });
      expect((await push(c, 'beta')).status).toBe(201);
      // Changes still reach the peers after the restart (pokes resubscribed, or the feed's period).
      expect((await admin(c, 'POST', '/admin/v1/tenants/gamma/resume')).status).toBe(200);
      await waitFor(async () => (await push(a, 'gamma')).status === 201 && (await push(b, 'gamma')).status === 201, 8000, 'gamma resumed on a and b');
    } finally {
      await c.close();
    }
  });
});
