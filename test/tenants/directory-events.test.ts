/** Change events of the tenant directory: generation, onChange, and a config-file reload. */
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import type { RawConfig } from '../../src/config/schema.js';
import { silentLogger } from '../../src/observability/log.js';
import { createTenantStore, type TenantStore } from '../../src/tenants/store.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const PLAN = {
  limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 0,
};

function config(tenants: Record<string, unknown>, redis: Record<string, unknown> = {}): RawConfig {
  return parseConfig({ redis, plans: { free: PLAN }, tenants }, {});
}

describe('reloadFile', () => {
  it("swaps the file's tenants, bumps the generation and tells subscribers; a bad file changes nothing", async () => {
    const store = await createTenantStore(config({ a: { plan: 'free', hosts: ['a.example'], brokers: ['http://127.0.0.1:1'] } }), { log: silentLogger() });
    const seen: number[] = [];
    store.onChange(() => seen.push(store.generation));
    const g0 = store.generation;
    const next = config({
      a: { plan: 'free', hosts: ['a.example'], brokers: ['http://127.0.0.1:2'] },
      b: { plan: 'free', hosts: ['b.example'], brokers: ['http://127.0.0.1:3'] },
    });
    expect(store.reloadFile(next)).toEqual({ ok: true });
    expect(store.generation).toBe(g0 + 1);
    expect(seen).toEqual([g0 + 1]);
    expect(store.byHost('b.example')?.brokers).toEqual(['http://127.0.0.1:3']);
    // The same file again: nothing a reader sees changed, so no event.
    expect(store.reloadFile(next)).toEqual({ ok: true });
    expect(seen).toEqual([g0 + 1]);
    const clash = config({
      a: { plan: 'free', hosts: ['x.example'], brokers: ['http://127.0.0.1:1'] },
      b: { plan: 'free', hosts: ['X.example'], brokers: ['http://127.0.0.1:1'] },
    });
    expect(store.reloadFile(clash)).toEqual({ ok: false, problems: ['tenants.b.hosts: host "x.example" is already listed by tenant "a"'] });
    expect(store.byHost('b.example')?.id).toBe('b');
    expect(store.generation).toBe(g0 + 1);
    await store.close();
  });
});

describe('generation across instances', () => {
  const prefix = uniquePrefix();
  const stores: TenantStore[] = [];
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    const r = await connectTest(SHARED_REDIS_URL);
    await flushPrefix(r, prefix);
    r.disconnect();
  });

  it("a write on one instance advances the other's generation once its snapshot holds the change", async () => {
    const cfg = config(
      { a: { plan: 'free', hosts: ['a.example'], brokers: ['http://127.0.0.1:1'] } },
      { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
    );
    const [writer, reader] = await Promise.all([
      createTenantStore(cfg, { log: silentLogger(), refreshMs: 60_000 }),
      createTenantStore(cfg, { log: silentLogger(), refreshMs: 60_000 }),
    ]);
    stores.push(writer, reader);
    const g0 = reader.generation;
    expect(await writer.setStatus('a', 'suspended')).toEqual({ ok: true });
    await waitFor(() => reader.generation > g0, 3000, 'the reader to load the change');
    expect(reader.byId('a')?.status).toBe('suspended');
  });
});
