/**
 * One description of each admin write, three backings: the same writes applied in memory, to Redis
 * and to the store leave the same records; a peer reading the rows a change names ends where the
 * writer did.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { directoryKeys } from '../../src/redis/keys.js';
import { Store } from '../../src/store/connection.js';
import { applyWrite, loadFromRedis, loadFromStore, readFromStore, redisWrite, writeToStore, type RecordWrite } from '../../src/tenants/records.js';
import { noRecords } from '../../src/tenants/snapshot.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';

const target = uniqueStore();
const prefix = uniquePrefix();
const keys = directoryKeys(prefix);
let store: Store;
let redis: Redis;

beforeAll(async () => {
  store = new Store(target, silentLogger());
  await store.migrate();
  redis = await connectTest(SHARED_REDIS_URL, 1000);
});
afterAll(async () => {
  await store.close();
  await flushPrefix(redis, prefix);
  redis.disconnect();
  await dropStore(target);
});

const record = (host: string) => JSON.stringify({ plan: 'free', hosts: [host], brokers: ['http://b:1'] });
const WRITES: RecordWrite[] = [
  { kind: 'tenant', id: 'beta', action: 'put', patch: { record: record('beta.example'), deleted: false, status: null, authSince: '1700000000000' } },
  { kind: 'tenant', id: 'acme', action: 'suspend', patch: { status: 'suspended' } },
  { kind: 'tenant', id: 'acme', action: 'storage', patch: { storage: '4096' } },
  { kind: 'tenant', id: 'old', action: 'delete', patch: { record: null, deleted: true, status: null, storage: null, authSince: null } },
  { kind: 'plan', id: 'gold', action: 'put', record: JSON.stringify({ features: ['kv'] }) },
  { kind: 'tenant', id: 'beta', action: 'suspend', patch: { status: 'suspended' } },
  { kind: 'tenant', id: 'beta', action: 'resume', patch: { status: 'active' } },
  { kind: 'tenant', id: 'gone', action: 'put', patch: { record: record('gone.example'), deleted: false, status: null } },
  { kind: 'tenant', id: 'gone', action: 'reset', patch: { record: null, deleted: false, status: null, authSince: null } },
];

/** Records as plain values, JSON texts parsed (the store hands back its own spelling of a record). */
function view(r: ReturnType<typeof noRecords>): unknown {
  const parsed = (m: ReadonlyMap<string, string>) => Object.fromEntries([...m].sort().map(([k, v]) => [k, JSON.parse(v)]));
  return { tenants: parsed(r.tenants), plans: parsed(r.plans), deleted: [...r.deleted].sort(), status: r.status, storage: r.storage, authSince: r.authSince };
}

describe('record writes', () => {
  it('in memory, in Redis and in the store, the same writes leave the same records', async () => {
    const memory = noRecords();
    for (const w of WRITES) {
      applyWrite(memory, w);
      await redisWrite(redis, keys, w).exec();
      await writeToStore(store, w, 'test');
    }
    expect(view(memory)).toMatchObject({ deleted: ['old'], status: { acme: 'suspended', beta: 'active' }, storage: { acme: '4096' } });
    expect(view((await loadFromRedis(redis, keys)).records)).toEqual(view(memory));
    const loaded = await loadFromStore(store);
    expect(view(loaded.records)).toEqual(view(memory));
    expect(loaded.seq).toBe(WRITES.length);
    // `gone` was reset: no row is left of it.
    expect(await store.query("SELECT id FROM tenant_records WHERE id = 'gone'")).toEqual([]);
  });

  it("a peer that reads the rows a change names reaches the writer's records", async () => {
    const peer = noRecords();
    for (const w of await readFromStore(store, ['acme', 'beta', 'old', 'gone', 'never'], ['gold', 'none'])) applyWrite(peer, w);
    expect(view(peer)).toEqual(view((await loadFromStore(store)).records));
  });
});
