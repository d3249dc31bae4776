/**
 * The operator's scenario end to end: one edge with a store, a file tenant `acme` under load, a
 * tenant `beta` created through the admin API with an API key, a file tenant `gamma` suspended
 * through the admin API; then Redis is killed and started empty while `acme` keeps pushing. Every
 * record, key and suspension is still in force, the edge says that Redis came back empty, and
 * every push it answered as queued is in the ledger.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { Store } from '../../src/store/connection.js';
import { silentLogger } from '../../src/observability/log.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';
import { PrivateRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, metric } from '../admin/admin-call.js';

const target = uniqueStore();
let broker: BrokerDouble;
let redis: PrivateRedis;
let edge: EdgeHarness | null = null;

beforeAll(async () => {
  [broker, redis] = await Promise.all([startBrokerDouble(), PrivateRedis.start()]);
});

afterAll(async () => {
  await edge?.close();
  await Promise.all([broker?.close(), redis?.kill()]);
  await dropStore(target);
});

const tenant = (id: string) => ({ plan: 'test', hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true });

describe('Redis killed and started empty under load, with a store', { timeout: 90_000 }, () => {
  it('loses no tenant, key, suspension or counted push', async () => {
    const config: RawConfig = testConfig([broker.url], {
      redis: { url: redis.url, keyPrefix: 'qe:', timeoutMs: 500, failMode: 'local' },
      store: { url: target.url, schema: target.schema },
      server: { admin: { token: ADMIN_TOKEN } },
      tenants: { acme: { tenancyAwareBrokers: true }, gamma: tenant('gamma') },
    });
    const h = await startEdge(config);
    edge = h;
    expect((await admin(h, 'PUT', '/admin/v1/tenants/beta', { body: tenant('beta') })).status).toBe(200);
    const created = await admin(h, 'POST', '/admin/v1/tenants/beta/keys', { body: { name: 'customer', roles: ['read-write'] } });
    expect(created.status).toBe(201);
    const key: string = created.json.key;
    expect((await admin(h, 'POST', '/admin/v1/tenants/gamma/suspend')).status).toBe(200);

    const item = { items: [{ queue: 'q', payload: 1 }] };
    const acme = await token({ roles: ['read-write'], tenant: 'acme' });
    const asBeta = () => call(h, 'POST', '/api/v1/push', { headers: { authorization: `Bearer ${key}`, host: 'beta.localhost' }, body: item });
    const asGamma = async () =>
      call(h, 'POST', '/api/v1/push', { host: 'gamma.localhost', token: await token({ roles: ['read-write'], tenant: 'gamma' }), body: item });

    // acme's load: four clients pushing one message each, counting what the edge answered queued.
    let queued = 0;
    let running = true;
    const client = async () => {
      while (running) {
        const r = await call(h, 'POST', '/api/v1/push', { token: acme, body: item });
        if (r.status === 201) queued++;
      }
    };
    const load = Promise.all([client(), client(), client(), client()]);
    await waitFor(() => queued >= 50, 30_000, 'load before the kill');

    await redis.kill();
    const atKill = queued;
    await waitFor(() => queued >= atKill + 20, 30_000, 'pushes served while Redis is away');
    await redis.restart();
    await waitFor(async () => (await metric(h, 'queen_edge_redis_emptied_total')) >= 1, 30_000, 'Redis found emptied');
    const atRestart = queued;
    await waitFor(() => queued >= atRestart + 20, 30_000, 'pushes after the restart');
    running = false;
    await load;

    expect((await admin(h, 'GET', '/admin/v1/tenants/beta')).status).toBe(200);
    expect((await asBeta()).status).toBe(201);
    expect((await asGamma()).json).toMatchObject({ code: 'cluster_suspended' });

    // The meter flushes what it holds on close: then the ledger has every push answered queued.
    await h.close();
    edge = null;
    const store = new Store(target, silentLogger());
    try {
      const rows = await store.query<{ n: string }>("SELECT coalesce(sum(messages_pushed), 0) AS n FROM usage_hour WHERE tenant = 'acme'");
      expect(Number(rows[0]!.n)).toBe(queued);
    } finally {
      await store.close();
    }
  });
});
