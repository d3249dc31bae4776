/**
 * The tenant directory with Redis overrides (DESIGN §2, §8). The config file's plans and tenants
 * are the base; Redis records (layout in keys.ts) override them, tombstones hide them, and a
 * status hash suspends or resumes either. Lookups read an in-memory snapshot that is rebuilt and
 * swapped whole, so they stay sync and O(1) while a reload runs. A change reaches every
 * instance within a second through pub/sub on `<prefix>changes` (separate subscriber
 * connection); a full reload every few seconds covers lost messages and reconnects, and a failed
 * reload is retried shortly, so a slow moment of Redis does not delay a change to the next period.
 */
import { Cluster } from 'ioredis';
import type { z } from 'zod';
import { planSchema, tenantSchema, type RawConfig, type RawPlan, type RawTenant } from '../config/schema.js';
import { connectRedis, whenReady, type RedisClient } from '../limits/redis-connection.js';
import { storageVerdict } from '../limits/storage.js';
import type { Logger } from '../observability/log.js';
import { directoryKeys, type DirectoryKeys } from './keys.js';
import { compilePlan, compileTenant, type Plan, type Tenant, type TenantDirectory } from './model.js';

/** The outcome of a write: validation problems are values, listed by path. */
export type WriteResult = { readonly ok: true } | { readonly ok: false; readonly problems: readonly string[] };

/** The directory plus the storage gate, a plan lookup and the writer API for the admin API. */
export interface TenantStore extends TenantDirectory {
  /** Storage gate with hysteresis (see limits/storage.ts), as of the last snapshot. */
  storageBlocked(tenantId: string): boolean;
  /** The plan in force under an id (file or Redis record). */
  planById(id: string): Plan | undefined;
  /** Creates or replaces a tenant record (tenantSchema); clears a status override and a tombstone. */
  putTenant(id: string, raw: unknown): Promise<WriteResult>;
  /** Removes a tenant (Redis record and, via a tombstone, the file's); false when it did not exist. */
  deleteTenant(id: string): Promise<boolean>;
  /** Creates or replaces a plan record (planSchema). */
  putPlan(id: string, raw: unknown): Promise<WriteResult>;
  /** Suspends or resumes a tenant, whatever its record says. */
  setStatus(id: string, status: 'active' | 'suspended'): Promise<WriteResult>;
  /** Records the storage bytes a tenant uses (from the control plane). */
  setStorageUsed(id: string, bytes: number): Promise<WriteResult>;
  /** Reloads from Redis now; resolves when a snapshot taken after the call is in place. */
  refresh(): Promise<void>;
  /** Takes a new config file's plans and tenants (a validated config), over the Redis records last read; the snapshot swaps at once. */
  reloadFile(cfg: RawConfig): void;
  /** 'redis' when backed by Redis, 'static' for the file alone. */
  readonly backing: 'redis' | 'static';
  close(): Promise<void>;
}

/** Optional knobs for createTenantStore. */
export interface TenantStoreDeps {
  readonly log: Logger;
  /** A client owned by the caller (not closed by close()); otherwise one is made from cfg.redis. */
  readonly redis?: RedisClient;
  /** Safety-net full reload period; default 5000 ms. */
  readonly refreshMs?: number;
}

/** Delay before a failed reload is tried again. */
const RETRY_MS = 250;

/** Ids usable inside a Redis hash tag and a URL segment. */
const ID_RE = /^[A-Za-z0-9._-]{1,128}$/;

interface Snapshot {
  readonly byId: ReadonlyMap<string, Tenant>;
  readonly byHost: ReadonlyMap<string, Tenant>;
  readonly plans: ReadonlyMap<string, Plan>;
  readonly storage: ReadonlyMap<string, number>;
  readonly blocked: ReadonlySet<string>;
}

/** What one reload reads from Redis. */
interface RedisRecords {
  readonly tenants: ReadonlyMap<string, string>;
  readonly plans: ReadonlyMap<string, string>;
  readonly deleted: ReadonlySet<string>;
  readonly status: Readonly<Record<string, string>>;
  readonly storage: Readonly<Record<string, string>>;
}

const NO_RECORDS: RedisRecords = { tenants: new Map(), plans: new Map(), deleted: new Set(), status: {}, storage: {} };

function problemsOf(error: z.ZodError): string[] {
  return error.issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`);
}

class Directory implements TenantStore {
  readonly backing: 'redis' | 'static';
  #cfg: RawConfig;
  /** The Redis records of the last load, for a rebuild when only the file changes. */
  #records: RedisRecords = NO_RECORDS;
  readonly #log: Logger;
  readonly #redis: RedisClient | null;
  readonly #owned: boolean;
  readonly #keys: DirectoryKeys;
  #snap: Snapshot;
  /** Compiled objects by signature, reused so unchanged tenants keep their identity (limiter caches). */
  #compiledPlans = new Map<string, { sig: string; plan: Plan }>();
  #compiledTenants = new Map<string, { sig: string; tenant: Tenant }>();
  /** Invalid Redis records already logged (key → raw text), so a bad record is logged once. */
  #reported = new Map<string, string>();
  #subscriber: RedisClient | null = null;
  #timer: NodeJS.Timeout | null = null;
  #retry: NodeJS.Timeout | null = null;
  #closed = false;
  #inflight: Promise<void> | null = null;
  #again = false;
  #failing = false;

  constructor(cfg: RawConfig, log: Logger, redis: RedisClient | null, owned: boolean) {
    this.#cfg = cfg;
    this.#log = log;
    this.#redis = redis;
    this.#owned = owned;
    this.backing = redis ? 'redis' : 'static';
    this.#keys = directoryKeys(cfg.redis.keyPrefix);
    this.#snap = this.#build(NO_RECORDS, new Set());
  }

  byId(id: string): Tenant | undefined {
    return this.#snap.byId.get(id);
  }

  byHost(host: string): Tenant | undefined {
    return this.#snap.byHost.get(host);
  }

  storageUsed(id: string): number | undefined {
    return this.#snap.storage.get(id);
  }

  storageBlocked(tenantId: string): boolean {
    return this.#snap.blocked.has(tenantId);
  }

  planById(id: string): Plan | undefined {
    return this.#snap.plans.get(id);
  }

  all(): Iterable<Tenant> {
    return this.#snap.byId.values();
  }

  async start(refreshMs: number): Promise<void> {
    const redis = this.#redis;
    if (!redis) return;
    // A caller's client was waited for by the caller; waiting again only slows a boot with Redis down.
    if (this.#owned) await whenReady(redis, Math.max(1000, this.#cfg.redis.timeoutMs * 20));
    const sub = redis instanceof Cluster ? redis.duplicate(undefined, { enableOfflineQueue: true }) : redis.duplicate({ enableOfflineQueue: true });
    this.#subscriber = sub;
    sub.on('error', () => {});
    sub.on('message', (channel: string) => {
      if (channel === this.#keys.changes) void this.#refreshQuietly();
    });
    // After a reconnect, changes published while away were missed: reload.
    sub.on('ready', () => void this.#refreshQuietly());
    await sub.subscribe(this.#keys.changes).catch((err: unknown) => this.#log.warn({ err }, 'tenant store: subscribe failed; relying on periodic refresh'));
    await this.#refreshQuietly();
    this.#timer = setInterval(() => void this.#refreshQuietly(), refreshMs);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    if (this.#retry) clearTimeout(this.#retry);
    this.#timer = null;
    this.#retry = null;
    this.#subscriber?.disconnect();
    this.#subscriber = null;
    await this.#inflight?.catch(() => {});
    if (this.#owned) this.#redis?.disconnect();
  }

  reloadFile(cfg: RawConfig): void {
    this.#cfg = cfg;
    this.#snap = this.#build(this.#records, this.#snap.blocked);
  }

  refresh(): Promise<void> {
    if (this.#inflight) {
      this.#again = true;
      return this.#inflight;
    }
    this.#inflight = (async () => {
      do {
        this.#again = false;
        await this.#load();
      } while (this.#again);
    })().finally(() => {
      this.#inflight = null;
    });
    return this.#inflight;
  }

  async putTenant(id: string, raw: unknown): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const redis = this.#redis!;
    const parsed = tenantSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error) };
    if (!this.#snap.plans.has(parsed.data.plan)) return { ok: false, problems: [`plan: unknown plan "${parsed.data.plan}"`] };
    const k = this.#keys;
    await redis.multi().set(k.tenant(id), JSON.stringify(parsed.data)).sadd(k.tenants, id).srem(k.deleted, id).hdel(k.status, id).exec();
    await this.#announce(`tenant:${id}`);
    return { ok: true };
  }

  async deleteTenant(id: string): Promise<boolean> {
    if (this.#cannotWrite(id)) return false;
    const redis = this.#redis!;
    const existed = this.#snap.byId.has(id);
    const k = this.#keys;
    await redis.multi().del(k.tenant(id)).srem(k.tenants, id).sadd(k.deleted, id).hdel(k.status, id).hdel(k.storage, id).exec();
    await this.#announce(`tenant:${id}`);
    return existed;
  }

  async putPlan(id: string, raw: unknown): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const redis = this.#redis!;
    const parsed = planSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error) };
    await redis.multi().set(this.#keys.plan(id), JSON.stringify(parsed.data)).sadd(this.#keys.plans, id).exec();
    await this.#announce(`plan:${id}`);
    return { ok: true };
  }

  async setStatus(id: string, status: 'active' | 'suspended'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const redis = this.#redis!;
    if (!this.#snap.byId.has(id)) return { ok: false, problems: [`unknown tenant "${id}"`] };
    await redis.hset(this.#keys.status, id, status);
    await this.#announce(`status:${id}`);
    return { ok: true };
  }

  async setStorageUsed(id: string, bytes: number): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const redis = this.#redis!;
    if (!Number.isSafeInteger(bytes) || bytes < 0) return { ok: false, problems: ['bytes: must be a non-negative integer'] };
    await redis.hset(this.#keys.storage, id, String(bytes));
    await this.#announce(`storage:${id}`);
    return { ok: true };
  }

  /** The refusal when writing is impossible (no Redis) or the id unusable; null to go ahead. */
  #cannotWrite(id: string): WriteResult | null {
    if (!this.#redis) return { ok: false, problems: ['no Redis configured: tenants and plans come from the config file only'] };
    if (!ID_RE.test(id)) return { ok: false, problems: [`id: must match ${ID_RE.source}`] };
    return null;
  }

  /** Tells every instance, then reloads here so the writer reads its own write. */
  async #announce(what: string): Promise<void> {
    await this.#redis!.publish(this.#keys.changes, what);
    await this.refresh();
  }

  async #refreshQuietly(): Promise<void> {
    try {
      await this.refresh();
      if (this.#failing) this.#log.info('tenant store: Redis reachable again, overrides reloaded');
      this.#failing = false;
    } catch (err) {
      if (!this.#failing) this.#log.warn({ err }, 'tenant store: reload from Redis failed; serving the last snapshot');
      this.#failing = true;
      this.#retrySoon();
    }
  }

  /** One pending retry at a time; the periodic reload keeps running alongside. */
  #retrySoon(): void {
    if (this.#retry || this.#closed) return;
    this.#retry = setTimeout(() => {
      this.#retry = null;
      void this.#refreshQuietly();
    }, RETRY_MS);
    this.#retry.unref();
  }

  async #load(): Promise<void> {
    const redis = this.#redis!;
    const k = this.#keys;
    const first = await redis.pipeline().smembers(k.tenants).smembers(k.plans).smembers(k.deleted).hgetall(k.status).hgetall(k.storage).exec();
    const [tenantIds, planIds, deleted, status, storage] = (first ?? []).map(([err, value]) => {
      if (err) throw err;
      return value;
    }) as [string[], string[], string[], Record<string, string>, Record<string, string>];
    // Every directory key shares the {dir} hash tag, so one MGET serves Redis Cluster too.
    const keys = [...tenantIds.map((id) => k.tenant(id)), ...planIds.map((id) => k.plan(id))];
    const values = keys.length > 0 ? await redis.mget(keys) : [];
    const zip = (ids: string[], offset: number): Map<string, string> => {
      const m = new Map<string, string>();
      ids.forEach((id, i) => {
        const v = values[offset + i];
        if (typeof v === 'string') m.set(id, v);
      });
      return m;
    };
    const records: RedisRecords = { tenants: zip(tenantIds, 0), plans: zip(planIds, tenantIds.length), deleted: new Set(deleted), status, storage };
    this.#records = records;
    this.#snap = this.#build(records, this.#snap.blocked);
  }

  /** Parses one Redis record; an invalid one is logged (once per distinct text) and ignored. */
  #parse<T>(key: string, text: string, schema: z.ZodType<T>): T | null {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      this.#report(key, text, [`not JSON: ${(err as Error).message}`]);
      return null;
    }
    const parsed = schema.safeParse(value);
    if (!parsed.success) {
      this.#report(key, text, problemsOf(parsed.error));
      return null;
    }
    return parsed.data;
  }

  #report(key: string, text: string, problems: string[]): void {
    if (this.#reported.get(key) === text) return;
    this.#reported.set(key, text);
    this.#log.warn({ key, problems }, 'tenant store: invalid record in Redis ignored; the config file version stays');
  }

  #build(records: RedisRecords, blockedBefore: ReadonlySet<string>): Snapshot {
    const rawPlans = new Map<string, RawPlan>(Object.entries(this.#cfg.plans));
    for (const [id, text] of records.plans) {
      const key = this.#keys.plan(id);
      const p = this.#parse(key, text, planSchema);
      if (!p) continue;
      rawPlans.set(id, p);
      this.#reported.delete(key);
    }
    const plans = new Map<string, Plan>();
    const planSigs = new Map<string, string>();
    const compiledPlans = new Map<string, { sig: string; plan: Plan }>();
    for (const [id, raw] of rawPlans) {
      const sig = JSON.stringify(raw);
      const prev = this.#compiledPlans.get(id);
      const plan = prev?.sig === sig ? prev.plan : compilePlan(id, raw);
      plans.set(id, plan);
      planSigs.set(id, sig);
      compiledPlans.set(id, { sig, plan });
    }

    const rawTenants = new Map<string, RawTenant>(Object.entries(this.#cfg.tenants));
    for (const [id, text] of records.tenants) {
      const key = this.#keys.tenant(id);
      const t = this.#parse(key, text, tenantSchema);
      if (!t) continue;
      if (!plans.has(t.plan)) {
        this.#report(key, text, [`plan: unknown plan "${t.plan}"`]);
        continue;
      }
      rawTenants.set(id, t);
      this.#reported.delete(key);
    }
    for (const id of records.deleted) rawTenants.delete(id);

    const byId = new Map<string, Tenant>();
    const byHost = new Map<string, Tenant>();
    const compiledTenants = new Map<string, { sig: string; tenant: Tenant }>();
    for (const [id, base] of rawTenants) {
      const override = records.status[id];
      const status = override === 'active' || override === 'suspended' ? override : null;
      const raw: RawTenant = status ? { ...base, status } : base;
      // Present: file tenants are schema-checked against file plans (records only add plans), Redis ones above.
      const plan = plans.get(raw.plan)!;
      const sig = `${JSON.stringify(raw)}|${planSigs.get(raw.plan)}`;
      const prev = this.#compiledTenants.get(id);
      const tenant = prev?.sig === sig ? prev.tenant : compileTenant(id, raw, plan);
      byId.set(id, tenant);
      for (const h of tenant.hosts) byHost.set(h, tenant);
      compiledTenants.set(id, { sig, tenant });
    }
    this.#compiledPlans = compiledPlans;
    this.#compiledTenants = compiledTenants;

    const storage = new Map<string, number>();
    const blocked = new Set<string>();
    for (const [id, tenant] of byId) {
      const text = records.storage[id];
      const used = text === undefined ? undefined : Number(text);
      if (used !== undefined && Number.isFinite(used)) storage.set(id, used);
      if (storageVerdict(storage.get(id), tenant.plan.storageBytes, blockedBefore.has(id))) blocked.add(id);
    }
    return { byId, byHost, plans, storage, blocked };
  }
}

/** Builds the store: Redis-backed (started: subscribed, loaded, refreshing) or the file alone. */
export async function createTenantStore(cfg: RawConfig, deps: TenantStoreDeps): Promise<TenantStore> {
  const redis = deps.redis ?? connectRedis(cfg.redis);
  const store = new Directory(cfg, deps.log, redis, !deps.redis && redis !== null);
  await store.start(deps.refreshMs ?? 5000);
  return store;
}
