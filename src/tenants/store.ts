/**
 * The tenant directory with Redis overrides. The config file's plans and tenants are the base;
 * Redis records (layout in src/redis/keys.ts) override them, tombstones hide them, and a status hash
 * suspends or resumes either; snapshot.ts's buildSnapshot turns those inputs into one validated
 * snapshot, and judges admin writes the same way. Lookups read that snapshot, rebuilt and swapped
 * whole, so they stay sync and O(1) while a reload runs; onChange subscribers (broker health,
 * tenant verifiers) hear of every swap that changed something. A change reaches every instance
 * within a second through pub/sub on `<prefix>changes` (separate subscriber connection); a full
 * reload every few seconds covers lost messages and reconnects, and a failed reload is retried
 * shortly, so a slow moment of Redis does not delay a change to the next period.
 */
import { planSchema, tenantSchema, type RawTenant } from '../config/schema.js';
import { connectRedis, subscriberFor, whenReady, type RedisClient, type RedisTarget } from '../redis/connection.js';
import type { Logger } from '../observability/log.js';
import { directoryKeys, type DirectoryKeys } from '../redis/keys.js';
import { ID_PATTERN, type Plan, type Tenant, type TenantDirectory } from './model.js';
import { BrokerAddresses, brokerUrlsOf } from './broker-addresses.js';
import { buildSnapshot, NO_RECORDS, problemsOf, snapshotChanged, type Built, type FileDirectory, type RedisRecords, type Snapshot } from './snapshot.js';

/**
 * The outcome of a write: validation problems are values, listed by path. `conflict`: the
 * record is well-formed but clashes with another tenant (a host it already lists).
 */
export type WriteResult = { readonly ok: true } | { readonly ok: false; readonly problems: readonly string[]; readonly conflict?: boolean };

/** The directory plus the storage gate, a plan lookup and the writer API for the admin API. */
export interface TenantStore extends TenantDirectory {
  /** Storage gate with hysteresis (see storage.ts), as of the last snapshot. */
  storageBlocked(tenantId: string): boolean;
  /** The plan in force under an id (file or Redis record). */
  planById(id: string): Plan | undefined;
  /** The tenant record in force (Redis record or file entry, before a status override), for the admin view. */
  recordOf(id: string): RawTenant | undefined;
  /** When a record's own `auth` was written as it is now (ms); undefined for file tenants and records written before this was kept. */
  authSince(id: string): number | undefined;
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
  /**
   * Where a tenant's record and status come from: `file` (the configuration) or `admin` (written
   * through the admin API, over the file's entry or as a tenant of its own). Undefined: no tenant.
   */
  sourceOf(id: string): { readonly record: 'file' | 'admin'; readonly status: 'record' | 'admin'; readonly inFile: boolean } | undefined;
  /** Drops the admin API's overrides of a tenant of the file (record and status): the file's entry applies again. */
  resetToFile(id: string): Promise<WriteResult>;
  /** Reloads from Redis now; resolves when a snapshot taken after the call is in place. */
  refresh(): Promise<void>;
  /**
   * Replaces the config file's plans and tenants (a configuration reload). Nothing changes when
   * the new file's tenants are refused (bad id, unknown plan, a host listed twice).
   */
  reloadFile(file: FileDirectory): WriteResult;
  /**
   * Calls `listener` after every snapshot that changed something a reader can see (tenants,
   * plans, storage); returns the unsubscribe function.
   */
  onChange(listener: () => void): () => void;
  /** Counts the snapshots that changed something; tests and callers wait on it after a write. */
  readonly generation: number;
  /** 'redis' when backed by Redis, 'memory' for writes kept in this process only, 'static' for the file alone. */
  readonly backing: 'redis' | 'memory' | 'static';
  close(): Promise<void>;
}

/** What the store reads from the configuration: the file's directory and where Redis is. */
export interface TenantStoreSettings extends FileDirectory {
  readonly redis: RedisTarget & { readonly keyPrefix: string };
}

/** Optional knobs for createTenantStore. */
export interface TenantStoreDeps {
  readonly log: Logger;
  /** A client owned by the caller (not closed by close()); otherwise one is made from cfg.redis. */
  readonly redis?: RedisClient;
  /** Safety-net full reload period; default 5000 ms. */
  readonly refreshMs?: number;
  /**
   * Without Redis, accept admin writes and keep them in this process's memory (lost on exit):
   * the demo's console can suspend and resume. One process only: without Redis there is one.
   */
  readonly memoryOverrides?: boolean;
  /** The broker names resolved for the shared-broker rule (the app's, which learnt the file's); default a table of its own. */
  readonly addresses?: BrokerAddresses;
}

/** Delay before a failed reload is tried again. */
const RETRY_MS = 250;

/** The problems of the file's own entries in a build; empty when the file is acceptable. */
function fileProblems(built: Built): string[] {
  return built.rejected.filter((r) => r.source === 'file').flatMap((r) => r.problems);
}

class Directory implements TenantStore {
  readonly backing: 'redis' | 'memory' | 'static';
  /** How long an owned client may take to connect before the first load gives up. */
  readonly #readyMs: number;
  /** Redis Cluster seed nodes, for the subscriber when no node is known yet. */
  readonly #seeds: readonly string[];
  readonly #log: Logger;
  readonly #redis: RedisClient | null;
  readonly #owned: boolean;
  readonly #keys: DirectoryKeys;
  #file: FileDirectory;
  /** The Redis records the snapshot was built from (an admin write is checked against them). */
  #records: RedisRecords = NO_RECORDS;
  #snap: Snapshot;
  #generation = 0;
  readonly #listeners = new Set<() => void>();
  /** Rejected Redis records already logged, so a bad record is logged once while it stays bad. */
  #reported = new Set<string>();
  #subscriber: RedisClient | null = null;
  #timer: NodeJS.Timeout | null = null;
  #retry: NodeJS.Timeout | null = null;
  #closed = false;
  #inflight: Promise<void> | null = null;
  #again = false;
  #failing = false;
  /** Broker names resolved: records' names are learnt before a build judges them (docs/tenancy.md). */
  readonly #addresses: BrokerAddresses;

  constructor(cfg: TenantStoreSettings, log: Logger, redis: RedisClient | null, owned: boolean, memoryOverrides: boolean, addresses: BrokerAddresses) {
    this.#readyMs = Math.max(1000, cfg.redis.timeoutMs * 20);
    this.#seeds = cfg.redis.cluster;
    this.#log = log;
    this.#redis = redis;
    this.#owned = owned;
    this.backing = redis ? 'redis' : memoryOverrides ? 'memory' : 'static';
    this.#keys = directoryKeys(cfg.redis.keyPrefix);
    this.#file = { plans: cfg.plans, tenants: cfg.tenants, auth: cfg.auth };
    this.#addresses = addresses;
    this.#snap = buildSnapshot(this.#file, NO_RECORDS, undefined, addresses.identitiesOf).snapshot;
  }

  get generation(): number {
    return this.#generation;
  }

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  recordOf(id: string): RawTenant | undefined {
    return this.#snap.records.get(id);
  }

  authSince(id: string): number | undefined {
    const text = this.#records.authSince?.[id];
    return text === undefined ? undefined : Number(text);
  }

  sourceOf(id: string): ReturnType<TenantStore['sourceOf']> {
    const record = this.#snap.records.get(id);
    if (record === undefined) return undefined;
    const inFile = this.#file.tenants[id] !== undefined;
    // The snapshot keeps the file's own object for a tenant the file decides.
    return { record: record === this.#file.tenants[id] ? 'file' : 'admin', status: this.#records.status[id] === undefined ? 'record' : 'admin', inFile };
  }

  async resetToFile(id: string): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    if (this.#file.tenants[id] === undefined) return { ok: false, problems: [`tenant "${id}" is not in the configuration file: nothing to reset to`] };
    const r = this.#records;
    const tenants = new Map(r.tenants);
    tenants.delete(id);
    const deleted = new Set(r.deleted);
    deleted.delete(id);
    const status = { ...r.status };
    delete status[id];
    const k = this.#keys;
    await this.#commit(
      { ...r, tenants, deleted, status },
      (redis) => redis.multi().del(k.tenant(id)).srem(k.tenants, id).srem(k.deleted, id).hdel(k.status, id).hdel(k.authSince, id).exec(),
      `tenant:${id}`,
    );
    return { ok: true };
  }

  reloadFile(reloaded: FileDirectory): WriteResult {
    // A reload applies the global auth settings too: tenants' own are checked against the new ones.
    const file = { plans: reloaded.plans, tenants: reloaded.tenants, auth: reloaded.auth ?? this.#file.auth };
    const built = this.#build(file, this.#records);
    const problems = fileProblems(built);
    if (problems.length > 0) return { ok: false, problems };
    this.#file = file;
    this.#install(built);
    return { ok: true };
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
    if (this.#owned) await whenReady(redis, this.#readyMs);
    const sub = subscriberFor(redis, this.#seeds);
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
    const parsed = tenantSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error) };
    // The record is judged by the same build every reload runs, against the records in force.
    const text = JSON.stringify(parsed.data);
    await this.#addresses.learn(parsed.data.brokers);
    const r = this.#records;
    const deleted = new Set(r.deleted);
    deleted.delete(id);
    const status = { ...r.status };
    delete status[id];
    // A record's `auth` keeps its age while unchanged: the older of two holders keeps a shared key (src/auth/key-claims.ts).
    const before = r.tenants.get(id);
    const authText = JSON.stringify(parsed.data.auth);
    const sameAuth = before !== undefined && JSON.stringify((JSON.parse(before) as RawTenant).auth ?? null) === authText;
    const authSince = sameAuth ? r.authSince : { ...r.authSince, [id]: String(Date.now()) };
    const next = { ...r, tenants: new Map(r.tenants).set(id, text), deleted, status, authSince };
    const trial = this.#build(this.#file, next);
    const refused = trial.rejected.find((x) => x.kind === 'tenant' && x.id === id && x.source === 'redis');
    if (refused) return refused.conflict ? { ok: false, problems: refused.problems, conflict: true } : { ok: false, problems: refused.problems };
    // Among records the lower id wins a clash, so a new record could push a tenant in force out of
    // the directory (or back to its file version): such a write is a conflict too.
    const displaced = trial.rejected.find(
      (x) => x.kind === 'tenant' && x.id !== id && x.conflict && trial.snapshot.byId.get(x.id) !== this.#snap.byId.get(x.id),
    );
    if (displaced) return { ok: false, problems: displaced.problems.map((p) => `would displace tenant "${displaced.id}": ${p}`), conflict: true };
    const k = this.#keys;
    await this.#commit(
      next,
      (redis) => {
        const m = redis.multi().set(k.tenant(id), text).sadd(k.tenants, id).srem(k.deleted, id).hdel(k.status, id);
        return (sameAuth ? m : m.hset(k.authSince, id, authSince![id]!)).exec();
      },
      `tenant:${id}`,
    );
    return { ok: true };
  }

  async deleteTenant(id: string): Promise<boolean> {
    if (this.#cannotWrite(id)) return false;
    const existed = this.#snap.byId.has(id);
    const k = this.#keys;
    const r = this.#records;
    const tenants = new Map(r.tenants);
    tenants.delete(id);
    const status = { ...r.status };
    delete status[id];
    const storage = { ...r.storage };
    delete storage[id];
    const next = { ...r, tenants, deleted: new Set(r.deleted).add(id), status, storage };
    await this.#commit(
      next,
      (redis) => redis.multi().del(k.tenant(id)).srem(k.tenants, id).sadd(k.deleted, id).hdel(k.status, id).hdel(k.storage, id).hdel(k.authSince, id).exec(),
      `tenant:${id}`,
    );
    return existed;
  }

  async putPlan(id: string, raw: unknown): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const parsed = planSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error) };
    const text = JSON.stringify(parsed.data);
    const next = { ...this.#records, plans: new Map(this.#records.plans).set(id, text) };
    await this.#commit(next, (redis) => redis.multi().set(this.#keys.plan(id), text).sadd(this.#keys.plans, id).exec(), `plan:${id}`);
    return { ok: true };
  }

  async setStatus(id: string, status: 'active' | 'suspended'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    if (!this.#snap.byId.has(id)) return { ok: false, problems: [`unknown tenant "${id}"`] };
    const next = { ...this.#records, status: { ...this.#records.status, [id]: status } };
    await this.#commit(next, (redis) => redis.hset(this.#keys.status, id, status), `status:${id}`);
    return { ok: true };
  }

  async setStorageUsed(id: string, bytes: number): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    if (!Number.isSafeInteger(bytes) || bytes < 0) return { ok: false, problems: ['bytes: must be a non-negative integer'] };
    const next = { ...this.#records, storage: { ...this.#records.storage, [id]: String(bytes) } };
    await this.#commit(next, (redis) => redis.hset(this.#keys.storage, id, String(bytes)), `storage:${id}`);
    return { ok: true };
  }

  /** Applies a write: to Redis (then every instance reloads), or in memory, to `next` at once. */
  async #commit(next: RedisRecords, write: (redis: RedisClient) => Promise<unknown>, what: string): Promise<void> {
    if (this.#redis) {
      await write(this.#redis);
      await this.#announce(what);
      return;
    }
    this.#records = next;
    this.#install(this.#build(this.#file, next));
  }

  /** The refusal when writing is impossible (no Redis) or the id unusable; null to go ahead. */
  #cannotWrite(id: string): WriteResult | null {
    if (this.backing === 'static') return { ok: false, problems: ['no Redis configured: tenants and plans come from the config file only'] };
    if (!ID_PATTERN.test(id)) return { ok: false, problems: [`id: must match ${ID_PATTERN.source}`] };
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
    const first = await redis
      .pipeline()
      .smembers(k.tenants)
      .smembers(k.plans)
      .smembers(k.deleted)
      .hgetall(k.status)
      .hgetall(k.storage)
      .hgetall(k.authSince)
      .exec();
    const [tenantIds, planIds, deleted, status, storage, authSince] = (first ?? []).map(([err, value]) => {
      if (err) throw err;
      return value;
    }) as [string[], string[], string[], Record<string, string>, Record<string, string>, Record<string, string>];
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
    const tenants = zip(tenantIds, 0);
    await this.#addresses.learn(brokerUrlsOf(tenants.values()));
    this.#records = { tenants, plans: zip(planIds, tenantIds.length), deleted: new Set(deleted), status, storage, authSince };
    this.#install(this.#build(this.#file, this.#records));
  }

  #build(file: FileDirectory, records: RedisRecords): Built {
    return buildSnapshot(file, records, this.#snap, this.#addresses.identitiesOf);
  }

  /** Swaps the snapshot in, logs rejected records once, and tells subscribers when something changed. */
  #install(built: Built): void {
    const reported = new Set<string>();
    for (const r of built.rejected) {
      // A file entry is rejected at run time only when its record lost a host and the file's version clashes too.
      const key = r.source === 'file' ? `config:tenants.${r.id}` : r.kind === 'tenant' ? this.#keys.tenant(r.id) : this.#keys.plan(r.id);
      const line = `${key}\n${r.problems.join('\n')}`;
      reported.add(line);
      if (!this.#reported.has(line)) this.#log.warn({ key, problems: r.problems }, 'tenant store: record refused by the directory; the previous version stays');
    }
    this.#reported = reported;
    const before = this.#snap;
    this.#snap = built.snapshot;
    if (!snapshotChanged(before, built.snapshot)) return;
    this.#generation++;
    for (const listener of this.#listeners) {
      try {
        listener();
      } catch (err) {
        this.#log.error({ err }, 'tenant store: change listener failed');
      }
    }
  }
}

/** Builds the store: Redis-backed (started: subscribed, loaded, refreshing) or the file alone. */
export async function createTenantStore(cfg: TenantStoreSettings, deps: TenantStoreDeps): Promise<TenantStore> {
  const redis = deps.redis ?? connectRedis(cfg.redis);
  const store = new Directory(cfg, deps.log, redis, !deps.redis && redis !== null, deps.memoryOverrides === true, deps.addresses ?? new BrokerAddresses());
  await store.start(deps.refreshMs ?? 5000);
  return store;
}
