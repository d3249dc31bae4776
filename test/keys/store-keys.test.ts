/**
 * API keys in the durable store (store.url): two edges on one PostgreSQL and one Redis, a Redis
 * that comes back empty, a store that stops, and the copy of today's Redis key records.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { copyKeysToStore, openStoreKeys } from '../../src/keys/store-keys.js';
import type { ApiKeyStore } from '../../src/keys/store.js';
import { createLogger } from '../../src/observability/log.js';
import { Store, type StoreTarget } from '../../src/store/connection.js';
import { appendChange, ChangeFeed, changesSince } from '../../src/store/changes.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { dropStore, PrivatePostgres, uniqueStore } from '../helpers/pg.js';
import { PrivateRedis, SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { admin, ADMIN_TOKEN } from '../admin/admin-call.js';

const log = createLogger('silent');
const PUSH = { items: [{ queue: 'q', partition: 'p', payload: { n: 1 } }] };
let broker: BrokerDouble;

beforeAll(async () => {
  broker = await startBrokerDouble({ pushStatus: 201 });
});
afterAll(async () => broker?.close());

const tenantOn = (host: string) => ({ plan: 'test', hosts: [host], brokers: [broker.url], tenancyAwareBrokers: true });

function config(redisUrl: string | null, prefix: string, store: StoreTarget | null, tenants: Record<string, unknown> = {}): RawConfig {
  return testConfig([broker.url], {
    ...(redisUrl === null ? {} : { redis: { url: redisUrl, keyPrefix: prefix, timeoutMs: 500 } }),
    ...(store === null ? {} : { store }),
    server: { admin: { token: ADMIN_TOKEN } },
    tenants: { acme: { tenancyAwareBrokers: true }, ...tenants },
  });
}

async function push(h: EdgeHarness, key: string, host = 'acme.localhost'): Promise<number> {
  return (await call(h, 'POST', '/api/v1/push', { token: key, body: PUSH, host })).status;
}

async function createKey(h: EdgeHarness, tenant = 'acme'): Promise<{ id: string; key: string }> {
  const r = await admin(h, 'POST', `/admin/v1/tenants/${tenant}/keys`, { body: { name: 'k', roles: ['read-write'] } });
  expect(r.status).toBe(201);
  return r.json;
}

describe('two edges on one store and one Redis', () => {
  const target = uniqueStore();
  const prefix = uniquePrefix();
  let a: EdgeHarness;
  let b: EdgeHarness;
  let store: Store;
  let redis: Redis;
  const withB = () => config(SHARED_REDIS_URL, prefix, target, { b: tenantOn('b.localhost') });

  beforeAll(async () => {
    [a, b] = await Promise.all([startEdge(withB()), startEdge(withB())]);
    store = new Store(target, log);
    redis = await connectTest(SHARED_REDIS_URL);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    await store?.close();
    await flushPrefix(redis, prefix);
    redis?.disconnect();
    await dropStore(target);
  });

  it('a key created on one edge works on both; the store holds its hash only, Redis no record; create and revoke are in the change log; revoked on both', async () => {
    const { id, key } = await createKey(a);
    for (const h of [a, b]) await waitFor(async () => (await push(h, key)) === 201, 5000, 'the key served');
    const rows = await store.query('SELECT * FROM api_keys WHERE id = $1', [id]);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(JSON.stringify(rows)).not.toContain(key.slice(16));
    expect(await redis.keys(`${prefix}{keys}:key:*`)).toEqual([]);
    expect((await admin(b, 'DELETE', `/admin/v1/tenants/acme/keys/${id}`)).status).toBe(204);
    for (const h of [a, b]) await waitFor(async () => (await push(h, key)) === 401, 5000, 'the revoked key refused');
    // Logged as made by the admin token that asked (its id: the first 8 hex digits of its SHA-256).
    const tokenId = createHash('sha256').update(ADMIN_TOKEN).digest('hex').slice(0, 8);
    const log = (await changesSince(store, 0)).filter((c) => c.subject === `key:${id}`).map((c) => [c.action, c.actor]);
    expect(log).toEqual([
      ['create', tokenId],
      ['revoke', tokenId],
    ]);
  });

  it('a revocation no message announces (written in the store alone) is refused on both edges by the next read of the change log', async () => {
    const { id, key } = await createKey(a);
    for (const h of [a, b]) await waitFor(async () => (await push(h, key)) === 201, 5000, 'the key served');
    await store.transaction(async (tx) => {
      await tx.query('DELETE FROM api_keys WHERE id = $1', [id]);
      await appendChange(tx, target.schema, { actor: 'test', subject: `key:${id}`, action: 'revoke' });
    });
    // The feed reads every 5 s; a generous wait, far below a cache entry's 30 s.
    for (const h of [a, b]) await waitFor(async () => (await push(h, key)) === 401, 12_000, 'the revoked key refused');
  });

  it('a tenant removed from the file takes its keys out of the store; back under its id it starts with none', async () => {
    const { key } = await createKey(a, 'b');
    // Known on b once the create's message made it read the change log (tried before: not cached as unknown for long).
    await waitFor(async () => (await push(b, key, 'b.localhost')) === 201, 5000, 'the key served on b');
    const without = config(SHARED_REDIS_URL, prefix, target);
    await Promise.all([a.app.reload(without), b.app.reload(without)]);
    await waitFor(async () => (await store.query("SELECT id FROM api_keys WHERE tenant = 'b'")).length === 0, 5000, "b's keys gone from the store");
    await Promise.all([a.app.reload(withB()), b.app.reload(withB())]);
    for (const h of [a, b]) expect(await push(h, key, 'b.localhost')).toBe(401);
    expect((await admin(b, 'GET', '/admin/v1/tenants/b/keys')).json.keys).toEqual([]);
  });
});

describe('Redis comes back empty', () => {
  const target = uniqueStore();
  let priv: PrivateRedis;
  let edge: EdgeHarness;
  let later: EdgeHarness | undefined;
  beforeAll(async () => {
    priv = await PrivateRedis.start();
  });
  afterAll(async () => {
    await Promise.all([edge?.close(), later?.close()]);
    await priv?.kill();
    await dropStore(target);
  });

  it('loses no key: the running edge keeps it, an edge started afterwards reads it from the store', async () => {
    const cfg = config(priv.url, uniquePrefix(), target);
    edge = await startEdge(cfg);
    const { key } = await createKey(edge);
    expect(await push(edge, key)).toBe(201);
    await priv.kill();
    await priv.restart();
    await waitFor(async () => (await push(edge, key)) === 201, 10_000, 'the key served once Redis answers again');
    later = await startEdge(cfg);
    expect(await push(later, key)).toBe(201);
  });
});

describe('the store down', () => {
  let pgServer: PrivatePostgres;
  let edge: EdgeHarness;
  beforeAll(async () => {
    pgServer = await PrivatePostgres.start();
  });
  afterAll(async () => {
    await edge?.close();
    pgServer?.destroy();
  });

  it('existing keys keep verifying; key writes answer 503 store_unavailable; writes work again once it is back', async () => {
    edge = await startEdge(config(null, '', { url: pgServer.url, schema: 'queen_edge', timeoutMs: 1000 }));
    const { id, key } = await createKey(edge);
    expect(await push(edge, key)).toBe(201);
    pgServer.stop('immediate');
    expect(await push(edge, key)).toBe(201);
    const created = await admin(edge, 'POST', '/admin/v1/tenants/acme/keys', { body: { name: 'k', roles: ['read-write'] } });
    expect([created.status, created.json.code]).toEqual([503, 'store_unavailable']);
    const revoked = await admin(edge, 'DELETE', `/admin/v1/tenants/acme/keys/${id}`);
    expect([revoked.status, revoked.json.code]).toEqual([503, 'store_unavailable']);
    expect(await push(edge, key)).toBe(201);
    expect((await admin(edge, 'GET', '/admin/v1/tenants/acme/keys')).json.keys).toHaveLength(1);
    pgServer.restart();
    await waitFor(
      async () => (await admin(edge, 'DELETE', `/admin/v1/tenants/acme/keys/${id}`)).status === 204,
      10_000,
      'the revoke accepted once the store is back',
    );
    expect(await push(edge, key)).toBe(401);
  });
});

describe('copyKeysToStore', () => {
  const target = uniqueStore();
  const prefix = uniquePrefix();
  let before: EdgeHarness;
  let after: EdgeHarness | undefined;
  let redis: Redis;
  let store: Store;
  beforeAll(async () => {
    redis = await connectTest(SHARED_REDIS_URL);
    store = new Store(target, log);
    await store.migrate();
  });
  afterAll(async () => {
    await Promise.all([before?.close(), after?.close()]);
    await store?.close();
    await flushPrefix(redis, prefix);
    redis?.disconnect();
    await dropStore(target);
  });

  it("copies today's Redis key records (hashes as they are) into the store, once however often it runs; the keys work on an edge of the store", async () => {
    before = await startEdge(config(SHARED_REDIS_URL, prefix, null));
    const keys = [await createKey(before), await createKey(before)];
    // A record written by hand that does not parse is left behind.
    await redis.set(`${prefix}{keys}:key:zzzzzzzzzzzz`, 'not json');
    expect(await copyKeysToStore(redis, prefix, store)).toEqual({ copied: 2, present: 0 });
    expect(await copyKeysToStore(redis, prefix, store)).toEqual({ copied: 0, present: 2 });
    await before.close();
    after = await startEdge(config(SHARED_REDIS_URL, uniquePrefix(), target));
    for (const { key } of keys) expect(await push(after, key)).toBe(201);
    const listed = (await admin(after, 'GET', '/admin/v1/tenants/acme/keys')).json.keys.map((k: { id: string }) => k.id).sort();
    expect(listed).toEqual(keys.map((k) => k.id).sort());
  });
});

describe('a full read of the keys while keys are created', () => {
  const target = uniqueStore();
  afterAll(() => dropStore(target));

  it('keeps a key created while its pages were out: the read must not drop it', async () => {
    let release: () => void = () => {};
    let held: Promise<void> | null = null;
    let holding = false;
    /** Holds a whole read's page, read before the create, until released. */
    class HeldStore extends Store {
      override async query<R extends import('pg').QueryResultRow>(text: string, params: readonly unknown[] = []): Promise<R[]> {
        const rows = await super.query<R>(text, params);
        if (holding && text.includes('WHERE id > $1')) {
          holding = false;
          held = new Promise<void>((r) => {
            release = r;
          });
          await held;
        }
        return rows;
      }
    }
    const store = new HeldStore(target, log);
    await store.migrate();
    const feed = new ChangeFeed(store, log);
    const keys = (await openStoreKeys(store, feed, null, { keyPrefix: 'qe:', cluster: [] }, log)) as ApiKeyStore & { load(): Promise<void> };
    try {
      holding = true;
      const reading = keys.load();
      await waitFor(() => held !== null, 5000, 'the read held');
      const record = {
        id: 'k1createdwhilereading',
        tenant: 'acme',
        name: 'k',
        roles: ['read-write'],
        createdAt: Date.now(),
        expiresAt: null,
        hash: 'a'.repeat(64),
      };
      expect(await keys.add(record, 100)).toBe(true);
      release();
      await reading;
      expect(await keys.get(record.id)).toMatchObject({ id: record.id, tenant: 'acme' });
    } finally {
      await feed.stop();
      await keys.close();
      await store.close();
    }
  });
});
