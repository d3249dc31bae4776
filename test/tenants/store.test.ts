/** The Redis-backed tenant directory, against the shared test Redis with a private prefix. */
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { rememberChanges } from '../../src/config/tenant-ids.js';
import type { RawConfig } from '../../src/config/schema.js';
import { silentLogger } from '../../src/observability/log.js';
import { directoryKeys } from '../../src/redis/keys.js';
import { createTenantStore, type TenantStore } from '../../src/tenants/store.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const LIMITS = { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1048576, maxBatch: 1000 };
const PLAN = { features: [], limits: LIMITS, quotas: { messagesPerMonth: 1000, ingressBytesPerMonth: 10000 }, storageBytes: 1000 };

function config(prefix: string, url: string | null = null): RawConfig {
  return parseConfig({
    redis: { url, keyPrefix: prefix },
    plans: { free: PLAN },
    tenants: { base: baseTenant },
  });
}

const acme = { plan: 'free', hosts: ['acme.example.com'], brokers: ['http://10.0.0.1:6632/'] };
const baseTenant = { plan: 'free', hosts: ['base.example.com'], brokers: ['http://127.0.0.1:6632'] };

describe('tenant store on Redis', () => {
  const prefix = uniquePrefix();
  const k = directoryKeys(prefix);
  let client: Redis;
  let clientB: Redis;
  let a: TenantStore;
  let b: TenantStore;
  const warnings: { msg: string; key?: string }[] = [];

  beforeAll(async () => {
    client = await connectTest(SHARED_REDIS_URL);
    const cfg = config(prefix);
    // Long periodic refresh: what these tests see arrives by pub/sub.
    a = await createTenantStore(cfg, { log: silentLogger(), redis: client, refreshMs: 60_000 });
    const log = pino({ level: 'warn' }, { write: (s: string) => void warnings.push(JSON.parse(s) as { msg: string; key?: string }) });
    clientB = await connectTest(SHARED_REDIS_URL);
    b = await createTenantStore(cfg, { log, redis: clientB, refreshMs: 60_000 });
  });
  afterAll(async () => {
    await Promise.all([a.close(), b.close()]);
    await flushPrefix(client, prefix);
    client.disconnect();
    clientB.disconnect();
  });

  it('starts from the config file', () => {
    expect(a.backing).toBe('redis');
    expect(b.byHost('base.example.com')?.id).toBe('base');
    expect([...b.all()].map((t) => t.id)).toEqual(['base']);
  });

  it('a tenant written on one instance reaches another within a second (pub/sub)', async () => {
    expect(await a.putTenant('acme', acme)).toEqual({ ok: true });
    expect(a.byId('acme')?.brokers).toEqual(['http://10.0.0.1:6632']);
    const t0 = Date.now();
    await waitFor(() => b.byHost('acme.example.com')?.id === 'acme', 1000, 'acme on store b');
    expect(Date.now() - t0).toBeLessThan(1000);
  });

  it('a Redis record overrides the file tenant, and a plan record overrides the file plan', async () => {
    await a.putTenant('base', { plan: 'free', hosts: ['base.example.com'], brokers: ['http://127.0.0.1:6632'], limits: { requestBurst: 7 } });
    await waitFor(() => b.byId('base')?.limits.requestBurst === 7, 1000, 'override on b');
    await a.putPlan('free', { ...PLAN, limits: { ...LIMITS, messagesPerSec: 5 } });
    await waitFor(() => b.byId('acme')?.limits.messagesPerSec === 5, 1000, 'plan on b');
    expect(b.planById('free')?.limits.messagesPerSec).toBe(5);
    // Overrides still win over the plan.
    expect(b.byId('base')?.limits).toMatchObject({ requestBurst: 7, messagesPerSec: 5 });
  });

  it('keeps tenant objects whose record did not change (limiter caches key on them)', async () => {
    const before = b.byId('acme');
    await b.refresh();
    expect(b.byId('acme')).toBe(before);
  });

  it('validates writes and reports problems by path', async () => {
    const r = await a.putTenant('bad', { plan: 'free', brokers: ['not a url'] });
    expect(r.ok).toBe(false);
    expect(!r.ok && r.problems[0]).toMatch(/^brokers\.0: /);
    expect(await a.putTenant('x', { plan: 'gold', brokers: ['http://h:1'] })).toEqual({ ok: false, problems: ['plan: unknown plan "gold"'] });
    expect((await a.putTenant('no{tags}', acme)).ok).toBe(false);
  });

  it('ignores an invalid record in Redis and keeps the file version, logging it once', async () => {
    await client.multi().set(k.tenant('base'), '{"plan":"free","brokers":[]}').sadd(k.tenants, 'base').exec();
    await client.publish(k.changes, 'tenant:base');
    await waitFor(() => warnings.some((w) => w.key === k.tenant('base')), 1000, 'warning');
    expect(b.byId('base')?.limits.requestBurst).toBe(100);
    await b.refresh();
    expect(warnings.filter((w) => w.key === k.tenant('base'))).toHaveLength(1);
    // A valid record naming an unknown plan is ignored too, and also logged only once.
    await client
      .multi()
      .set(k.tenant('ghost'), JSON.stringify({ plan: 'gold', brokers: ['http://h:1'] }))
      .sadd(k.tenants, 'ghost')
      .exec();
    await b.refresh();
    await b.refresh();
    expect(b.byId('ghost')).toBeUndefined();
    expect(warnings.filter((w) => w.key === k.tenant('ghost'))).toHaveLength(1);
    await client.set(k.tenant('bogus'), 'not json');
    await client.sadd(k.tenants, 'bogus');
    await b.refresh();
    expect(b.byId('bogus')).toBeUndefined();
  });

  it('suspends and resumes by status override, and deletes file tenants with a tombstone', async () => {
    expect(await a.setStatus('acme', 'suspended')).toEqual({ ok: true });
    await waitFor(() => b.byId('acme')?.status === 'suspended', 1000, 'suspended on b');
    await a.setStatus('acme', 'active');
    await waitFor(() => b.byId('acme')?.status === 'active', 1000, 'resumed on b');
    expect(await a.setStatus('nobody', 'active')).toEqual({ ok: false, problems: ['unknown tenant "nobody"'] });
    expect(await a.deleteTenant('base')).toBe(true);
    await waitFor(() => b.byHost('base.example.com') === undefined, 1000, 'base gone on b');
    expect(await a.putTenant('base', { plan: 'free', hosts: ['base.example.com'], brokers: ['http://127.0.0.1:6632'] })).toEqual({ ok: true });
    await waitFor(() => b.byId('base') !== undefined, 1000, 'base back on b');
  });

  it('storage gate: blocked at the plan, released only below 90%', async () => {
    await a.putPlan('free', PLAN); // storageBytes 1000
    const seen = async (bytes: number): Promise<boolean> => {
      await a.setStorageUsed('acme', bytes);
      await waitFor(() => b.storageUsed('acme') === bytes, 1000, `storage ${bytes} on b`);
      return b.storageBlocked('acme');
    };
    expect(b.storageBlocked('acme')).toBe(false);
    expect(await seen(999)).toBe(false);
    expect(await seen(1000)).toBe(true);
    expect(await seen(950)).toBe(true);
    expect(await seen(900)).toBe(true);
    expect(await seen(899)).toBe(false);
    expect(await seen(950)).toBe(false);
    expect((await a.setStorageUsed('acme', -1)).ok).toBe(false);
  });
});

describe('tenant store safety net and static mode', () => {
  it('picks up a change without pub/sub by the periodic refresh', async () => {
    const prefix = uniquePrefix();
    const client = await connectTest(SHARED_REDIS_URL);
    const s = await createTenantStore(config(prefix), { log: silentLogger(), redis: client, refreshMs: 100 });
    const k = directoryKeys(prefix);
    await client.hset(k.status, 'base', 'suspended'); // no PUBLISH
    await waitFor(() => s.byId('base')?.status === 'suspended', 1000, 'periodic refresh');
    await s.close();
    await flushPrefix(client, prefix);
    client.disconnect();
  });

  it('serves the file alone when no Redis is configured, and refuses writes', async () => {
    const s = await createTenantStore(config('qe:'), { log: silentLogger() });
    expect(s.backing).toBe('static');
    expect(s.byHost('base.example.com')?.id).toBe('base');
    expect(s.storageUsed('base')).toBeUndefined();
    expect(s.storageBlocked('base')).toBe(false);
    expect((await s.putTenant('acme', acme)).ok).toBe(false);
    await s.close();
  });

  it("takes a reloaded file's changes from its reader when read against the running file, and compares them itself otherwise", async () => {
    const cfg = config('qe:');
    const s = await createTenantStore(cfg, { log: silentLogger() });
    const tenants = { ...cfg.tenants, acme: parseConfig({ plans: cfg.plans, tenants: { acme } }).tenants.acme! };
    // The reader's list is trusted as given (here it leaves out `acme`, to tell which was used)...
    rememberChanges(tenants, { base: cfg.tenants, changed: ['base'] });
    expect((await s.diffFile({ ...cfg, tenants })).changed).toEqual(['base']);
    // ...but only against the file it was read against: another base, and the store compares.
    rememberChanges(tenants, { base: { ...cfg.tenants }, changed: ['base'] });
    const diff = await s.diffFile({ ...cfg, tenants });
    expect(diff.changed).toEqual(['acme']);
    expect(s.reloadFile({ ...cfg, tenants }, diff)).toEqual({ ok: true });
    expect(s.byHost('acme.example.com')?.id).toBe('acme');
    await s.close();
  });

  it('counts the tenants on each plan through reloads: placed one by one, and after a full build', async () => {
    const cfg = parseConfig({ plans: { free: PLAN, pro: PLAN }, tenants: { base: baseTenant, acme } });
    const s = await createTenantStore(cfg, { log: silentLogger() });
    const counts = () => Object.fromEntries(s.tenantsByPlan());
    expect(counts()).toEqual({ free: 2 });
    // One tenant moves to pro: placed alone.
    const moved = { ...cfg, tenants: { ...cfg.tenants, acme: { ...cfg.tenants.acme!, plan: 'pro' } } };
    expect(s.reloadFile(moved, await s.diffFile(moved))).toEqual({ ok: true });
    expect(counts()).toEqual({ free: 1, pro: 1 });
    // A plan changed: every tenant is built again, each counted once; a removed tenant is not.
    const { acme: _gone, ...rest } = moved.tenants;
    const rebuilt = { ...moved, plans: { ...moved.plans, pro: { ...PLAN, storageBytes: 5 } }, tenants: rest };
    expect(s.reloadFile(rebuilt, await s.diffFile(rebuilt))).toEqual({ ok: true });
    expect(counts()).toEqual({ free: 1 });
    await s.close();
  });

  describe('a reload that changes a plan, at 6,000 tenants', () => {
    const sized = (rps: number): RawConfig => {
      const tenants: Record<string, unknown> = {};
      for (let i = 0; i < 6000; i++)
        tenants[`t${i}`] = { plan: 'free', hosts: [`t${i}.example`], brokers: ['http://127.0.0.1:6632'], tenancyAwareBrokers: true };
      return parseConfig({ plans: { free: { ...PLAN, limits: { ...LIMITS, requestsPerSec: rps } } }, tenants });
    };

    it('is built in slices before the swap, which puts that build in force', async () => {
      const cfg = sized(50);
      const s = await createTenantStore(cfg, { log: silentLogger(), memoryOverrides: true });
      const next = sized(70);
      const diff = await s.diffFile(next);
      expect(diff.plans).toBe(true);
      let turns = 0;
      const ticker = setInterval(() => turns++, 0);
      const prepared = await s.prepareFile(next, diff);
      clearInterval(ticker);
      expect(turns).toBeGreaterThan(0);
      expect(s.byId('t1')?.limits.requestsPerSec).toBe(50);
      expect(s.reloadFile(next, prepared)).toEqual({ ok: true });
      expect(s.byId('t1')).toBe(prepared.built?.index.byId.get('t1'));
      expect(s.byId('t1')?.limits.requestsPerSec).toBe(70);
      await s.close();
    });

    it('is refused whole when a tenant of the new file is refused: nothing changes', async () => {
      const cfg = sized(50);
      const s = await createTenantStore(cfg, { log: silentLogger(), memoryOverrides: true });
      const good = sized(70);
      const next = { ...good, tenants: { ...good.tenants, t5: { ...good.tenants.t5!, plan: 'gone' } } };
      const t1 = s.byId('t1');
      const refused = s.reloadFile(next, await s.prepareFile(next, await s.diffFile(next)));
      expect(refused).toMatchObject({ ok: false, problems: ['tenants.t5.plan: unknown plan "gone"'] });
      expect(s.byId('t1')).toBe(t1);
      expect(s.byId('t5')?.limits.requestsPerSec).toBe(50);
      await s.close();
    });

    it('is built again at the swap when the directory changed after it began', async () => {
      const cfg = sized(50);
      const s = await createTenantStore(cfg, { log: silentLogger(), memoryOverrides: true });
      const next = sized(70);
      const prepared = await s.prepareFile(next, await s.diffFile(next));
      expect((await s.setStatus('t2', 'suspended')).ok).toBe(true);
      expect(s.reloadFile(next, prepared)).toEqual({ ok: true });
      expect(s.byId('t1')).not.toBe(prepared.built?.index.byId.get('t1'));
      expect(s.byId('t1')?.limits.requestsPerSec).toBe(70);
      expect(s.byId('t2')?.status).toBe('suspended');
      await s.close();
    });
  });

  it('connects by itself from redis.url', async () => {
    const prefix = uniquePrefix();
    const s = await createTenantStore(config(prefix, SHARED_REDIS_URL), { log: silentLogger() });
    expect(await s.putTenant('acme', acme)).toEqual({ ok: true });
    expect(s.byId('acme')).toBeDefined();
    await s.deleteTenant('acme');
    await s.close();
    const client = await connectTest(SHARED_REDIS_URL);
    await flushPrefix(client, prefix);
    client.disconnect();
  });
});
