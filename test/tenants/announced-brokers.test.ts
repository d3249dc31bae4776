/**
 * What a write puts in force before the full build it leads to is served meanwhile: the brokers it
 * lists are announced to the broker set, so that a broker the build then leaves out is removed
 * again rather than tracked (and probed) for good by the requests served in between.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/observability/log.js';
import { directoryKeys } from '../../src/redis/keys.js';
import { createTenantStore, type TenantStore } from '../../src/tenants/store.js';
import { createClusters, type Clusters } from '../../src/upstream/clusters.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';

const LIMITS = { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1048576, maxBatch: 1000 };
const PLAN = { features: [], limits: LIMITS, quotas: { messagesPerMonth: 1000, ingressBytesPerMonth: 10000 }, storageBytes: 1000 };
const SHARED = 'http://10.0.0.1:6632';
const Z = 'http://10.0.0.26:6632';
const prefix = uniquePrefix();
const k = directoryKeys(prefix);
// Enough tenants that a full build takes several turns of the event loop.
const tenants: Record<string, unknown> = { zeta: { plan: 'free', hosts: ['h1.example.com'], brokers: [SHARED], tenancyAwareBrokers: true } };
for (let i = 0; i < 20_000; i++) tenants[`t${i}`] = { plan: 'free', hosts: [`t${i}.example.com`], brokers: [SHARED], tenancyAwareBrokers: true };
const config = parseConfig({ redis: { keyPrefix: prefix }, plans: { free: PLAN }, tenants });

let client: Redis;
let store: TenantStore;
let clusters: Clusters;

beforeAll(async () => {
  client = await connectTest(SHARED_REDIS_URL);
  // delta wants zeta's host: refused while the file's zeta holds it, in force once zeta lets it go.
  const delta = { plan: 'free', hosts: ['h1.example.com', 'h2.example.com'], brokers: ['http://10.0.0.4:6632'] };
  await client.multi().set(k.tenant('delta'), JSON.stringify(delta)).sadd(k.tenants, 'delta').exec();
  store = await createTenantStore(config, { log: silentLogger(), redis: client, refreshMs: 60_000 });
  clusters = createClusters({ healthIntervalMs: 60_000, healthTimeoutMs: 1000, downAfter: 1, upAfter: 1 }, { log: silentLogger(), probe: async () => true });
  clusters.start(store.all());
  store.onChange((c) => {
    if (c.brokers) clusters.follow(c.brokers);
  });
}, 30_000);

afterAll(async () => {
  await clusters.close();
  await store.close();
  await flushPrefix(client, prefix);
  client.disconnect();
});

describe('brokers of a version in force until the full build', () => {
  it('a broker served in between and left out by the build is not tracked afterwards', async () => {
    expect(store.byId('delta')).toBeUndefined();
    // zeta's record frees h1 (delta may get in: a full build decides) and takes h2 on broker Z.
    let served = false;
    let polling = true;
    const poll = (): void => {
      const t = store.byHost('h2.example.com');
      if (t?.brokers.includes(Z)) {
        served = true;
        clusters.pick(t, null);
      }
      if (polling) setImmediate(poll);
    };
    setImmediate(poll);
    expect(await store.putTenant('zeta', { plan: 'free', hosts: ['h2.example.com'], brokers: [Z] })).toEqual({ ok: true });
    polling = false;
    expect(served).toBe(true);
    // The build: delta (before zeta by id among records) takes h1 and h2, zeta's versions are refused.
    expect(store.byId('delta')).toBeDefined();
    expect(store.byId('zeta')).toBeUndefined();
    expect(clusters.brokers().map((b) => b.url)).not.toContain(Z);
  });
});
