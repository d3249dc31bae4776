/**
 * The tenant directory with the admin API's records over the file (in the store, or Redis). The config file's plans and tenants are the base;
 * Redis records (layout in src/redis/keys.ts) override them, tombstones hide them, and a status hash
 * suspends or resumes either; snapshot.ts's TenantIndex turns those inputs into one validated
 * directory, and judges admin writes the same way. Lookups are sync and O(1). A change to one
 * tenant (an admin write here, or its message from another instance) places that tenant again in
 * the index in place, in O(1); what touches every tenant (the start, a plan change, a reload
 * that missed messages) builds a new index in slices that yield to the event loop and swaps it in
 * (docs/tenancy.md, "Many tenants"). onChange subscribers (broker health, tenant verifiers) hear
 * of every change with the tenants it touched.
 *
 * With a durable store (store.url) the records live there instead (src/tenants/records.ts): each
 * write is one transaction with its change-log entry, peers are poked over Redis, and every
 * instance, the writer too, places changes as its one change feed reads them from the log; Redis
 * then holds no record (docs/store.md). Without one, as follows.
 *
 * A change reaches every instance within a second through pub/sub on `<prefix>changes` (separate
 * subscriber connection): each message names the tenant (or plan) and the directory version its
 * write reached, so a peer applies it alone unless it missed one, in which case it reloads
 * everything. A check of the version every few seconds covers lost messages and reconnects, and a
 * failed reload is retried shortly, so a slow moment of Redis does not delay a change to the next
 * period.
 */
import { ConfigError } from '../config/load.js';
import { planSchema, tenantSchema, type RawTenant } from '../config/schema.js';
import { connectRedis, subscriberFor, whenReady, type RedisClient, type RedisTarget, type Subscriber } from '../redis/connection.js';
import type { Logger } from '../observability/log.js';
import { directoryKeys, type DirectoryKeys } from '../redis/keys.js';
import { ID_PATTERN, type Plan, type Tenant, type TenantDirectory } from './model.js';
import type { RawPlan } from '../config/schema.js';
import {
  changedTenants,
  changedTenantsInSteps,
  noRecords,
  problemsOf,
  sameMap,
  snapshotChanged,
  TenantIndex,
  type FileDirectory,
  type RedisRecords,
} from './snapshot.js';
import { BrokerAddresses, brokerUrlsOf } from './broker-addresses.js';
import { brokerChange, brokersSwapped, type BrokerChange } from './broker-moves.js';
import { changesOf, eachTenant, runSteps, stepInSlices, tenantIds } from '../config/tenant-ids.js';
import type { Store } from '../store/connection.js';
import type { Change, ChangeFeed } from '../store/changes.js';
import { applyWrite, loadFromRedis, loadFromStore, readFromStore, redisWrite, subjectOf, writeToStore, type RecordWrite } from './records.js';

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
  /** Plan ids with tenants in force and how many, kept as tenants are placed: no walk over the tenants. */
  tenantsByPlan(): ReadonlyMap<string, number>;
  /** The tenant record in force (Redis record or file entry, before a status override), for the admin view. */
  recordOf(id: string): RawTenant | undefined;
  /** When a record's own `auth` was written as it is now (ms); undefined for file tenants and records written before this was kept. */
  authSince(id: string): number | undefined;
  /**
   * Writers: `actor` names who wrote (the change log's, with a store). With a store they throw a
   * StoreUnavailableError when it cannot be reached (the admin API answers 503 store_unavailable).
   * Creates or replaces a tenant record (tenantSchema); clears a status override and a tombstone.
   */
  putTenant(id: string, raw: unknown, actor?: string): Promise<WriteResult>;
  /** Removes a tenant (its record and, via a tombstone, the file's); false when it did not exist. */
  deleteTenant(id: string, actor?: string): Promise<boolean>;
  /** Creates or replaces a plan record (planSchema). */
  putPlan(id: string, raw: unknown, actor?: string): Promise<WriteResult>;
  /** Suspends or resumes a tenant, whatever its record says. */
  setStatus(id: string, status: 'active' | 'suspended', actor?: string): Promise<WriteResult>;
  /** Records the storage bytes a tenant uses (from the control plane). */
  setStorageUsed(id: string, bytes: number, actor?: string): Promise<WriteResult>;
  /**
   * Where a tenant's record and status come from: `file` (the configuration) or `admin` (written
   * through the admin API, over the file's entry or as a tenant of its own). Undefined: no tenant.
   */
  sourceOf(id: string): { readonly record: 'file' | 'admin'; readonly status: 'record' | 'admin'; readonly inFile: boolean } | undefined;
  /** Drops the admin API's overrides of a tenant of the file (record and status): the file's entry applies again. */
  resetToFile(id: string, actor?: string): Promise<WriteResult>;
  /** Reloads from the store (or Redis) now; resolves when a snapshot taken after the call is in place. */
  refresh(): Promise<void>;
  /**
   * Replaces the config file's plans and tenants (a configuration reload). Nothing changes when
   * the new file's tenants are refused (bad id, unknown plan, a host listed twice).
   */
  reloadFile(file: FileDirectory, diff?: FileDiff): WriteResult;
  /**
   * Compares a new file's tenants with the running file's, in slices between event-loop turns
   * (100,000 tenants take a few hundred milliseconds): reloadFile then skips the comparison.
   */
  diffFile(file: FileDirectory): Promise<FileDiff>;
  /**
   * When `diff` says a plan changed (every tenant on it follows: a full build, about a second at
   * 100,000 tenants), builds the new directory now, in slices between event-loop turns;
   * reloadFile then swaps it in, unless the directory changed meanwhile (then it builds again).
   */
  prepareFile(file: FileDirectory, diff: FileDiff): Promise<FileDiff>;
  /** File tenants whose record or status the admin API overrides, or that it deleted. */
  overridden(): string[];
  /**
   * Calls `listener` after every change a reader can see (tenants, plans, storage), with what it
   * touched; returns the unsubscribe function.
   */
  onChange(listener: (change: DirectoryChange) => void): () => void;
  /** Tenants in force with their own token settings (few): what the verifiers follow. */
  withOwnAuth(): Iterable<Tenant>;
  /** Counts the snapshots that changed something; tests and callers wait on it after a write. */
  readonly generation: number;
  /** 'store' when backed by the durable store, 'redis' by Redis, 'memory' for writes kept in this process only, 'static' for the file alone. */
  readonly backing: 'store' | 'redis' | 'memory' | 'static';
  close(): Promise<void>;
}

/** The file tenants that differ between the running file (`base`) and `next`, and whether the plans do. */
export interface FileDiff {
  readonly base: FileDirectory;
  readonly next: Readonly<Record<string, RawTenant>>;
  readonly changed: readonly string[];
  readonly plans: boolean;
  /** prepareFile's build, and the directory it was built over (its index and how many edits it had seen). */
  readonly built?: { readonly index: TenantIndex; readonly touched: ReadonlySet<string>; readonly over: TenantIndex; readonly edits: number };
}

/** What one change touched. */
export interface DirectoryChange {
  /** Tenants added, removed or changed. */
  readonly tenants: ReadonlySet<string>;
  /** The broker URLs listed for the first time, or no longer; null when their set did not change. */
  readonly brokers: BrokerChange | null;
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
  /** Safety-net period: the directory version is checked every period, everything read every sixth; default 5000 ms. */
  readonly refreshMs?: number;
  /**
   * Without Redis, accept admin writes and keep them in this process's memory (lost on exit):
   * the demo's console can suspend and resume. One process only: without Redis there is one.
   */
  readonly memoryOverrides?: boolean;
  /** The broker names resolved for the shared-broker rule (the app's, which learnt the file's); default a table of its own. */
  readonly addresses?: BrokerAddresses;
  /** The durable store: records live there, not in Redis (which then only carries the change pokes). */
  readonly store?: StoreBacking;
}

/** The durable store as the directory uses it: the pool, the process's one change feed, and the poke to peers. */
export interface StoreBacking {
  readonly store: Store;
  readonly feed: ChangeFeed;
  /** Tells peers a change committed (a Redis message); never throws: they also read the log every period. */
  announce(seq: number, subject: string): Promise<void>;
}

/** Delay before a failed reload is tried again. */
const RETRY_MS = 250;

/** The problems of the file's own entries in a build; empty when the file is acceptable. */
function fileProblems(rejected: ReturnType<TenantIndex['rejectionsOf']>): string[] {
  return rejected.filter((r) => r.source === 'file').flatMap((r) => r.problems);
}

/** Structural equality of two parsed records (JSON values). */
function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if (!sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k])) return false;
  return true;
}

/** The ids added, changed or removed between two tenant maps, in steps (stepInSlices, or runSteps at once). */
function* tenantChanges(base: FileDirectory['tenants'], next: FileDirectory['tenants']): Generator<void, string[], void> {
  const changed: string[] = [];
  let n = 0;
  for (const id of tenantIds(next)) {
    if (!sameValue(base[id], next[id])) changed.push(id);
    if (++n % 64 === 0) yield;
  }
  for (const id of tenantIds(base)) {
    if (next[id] === undefined) changed.push(id);
    if (++n % 64 === 0) yield;
  }
  return changed;
}

class Directory implements TenantStore {
  readonly backing: 'store' | 'redis' | 'memory' | 'static';
  /** How long an owned client may take to connect before the first load gives up. */
  readonly #readyMs: number;
  /** Redis Cluster seed nodes, for the subscriber when no node is known yet. */
  readonly #seeds: readonly string[];
  readonly #log: Logger;
  readonly #redis: RedisClient | null;
  readonly #durable: StoreBacking | null;
  readonly #owned: boolean;
  readonly #keys: DirectoryKeys;
  #file: FileDirectory;
  /** The index in force; its `redis` are the Redis records it was built from, edited in place by each change. */
  #snap: TenantIndex;
  /** The directory version (Redis `version`) the records are known to be at; -1 before the first load. */
  #version = -1;
  #generation = 0;
  readonly #listeners = new Set<(change: DirectoryChange) => void>();
  /** Rejected Redis records already logged, so a bad record is logged once while it stays bad. */
  #reported = new Set<string>();
  #subscriber: Subscriber | null = null;
  #timer: NodeJS.Timeout | null = null;
  #retry: NodeJS.Timeout | null = null;
  #closed = false;
  #inflight: Promise<void> | null = null;
  #again = false;
  #failing = false;
  /** A full build in progress; changes placed meanwhile are placed again in its result. */
  #building: Promise<void> | null = null;
  #placedDuringBuild = new Set<string>();
  /** Messages from other instances, applied one at a time in their order. */
  #messages: Promise<void> = Promise.resolve();

  /** Broker names resolved: records' names are learnt before they are judged (docs/tenancy.md). */
  readonly #addresses: BrokerAddresses;

  constructor(
    cfg: TenantStoreSettings,
    log: Logger,
    redis: RedisClient | null,
    owned: boolean,
    memoryOverrides: boolean,
    addresses: BrokerAddresses,
    durable: StoreBacking | null,
  ) {
    this.#readyMs = Math.max(1000, cfg.redis.timeoutMs * 20);
    this.#seeds = cfg.redis.cluster;
    this.#log = log;
    this.#redis = redis;
    this.#durable = durable;
    this.#owned = owned;
    this.backing = durable ? 'store' : redis ? 'redis' : memoryOverrides ? 'memory' : 'static';
    this.#keys = directoryKeys(cfg.redis.keyPrefix);
    this.#file = { plans: cfg.plans, tenants: cfg.tenants, auth: cfg.auth };
    this.#addresses = addresses;
    this.#snap = new TenantIndex(this.#file, noRecords(), undefined, addresses.identitiesOf);
    for (const _ of this.#snap.build());
    // Not news: the start tracks every broker of the directory it is given.
    this.#snap.brokerMoves.clear();
    // The file's tenants are judged here as by compileTables: a refused one is a configuration problem.
    const problems = fileProblems(this.#snap.rejected);
    if (problems.length > 0) throw new ConfigError(problems);
  }

  get generation(): number {
    return this.#generation;
  }

  onChange(listener: (change: DirectoryChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  withOwnAuth(): Iterable<Tenant> {
    return this.#snap.withOwnAuth();
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
    return { record: this.#snap.fromRecord.has(id) ? 'admin' : 'file', status: this.#records.status[id] === undefined ? 'record' : 'admin', inFile };
  }

  get #records(): RedisRecords {
    return this.#snap.redis;
  }

  async resetToFile(id: string, actor = 'admin'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const entry = this.#file.tenants[id];
    if (entry === undefined) return { ok: false, problems: [`tenant "${id}" is not in the configuration file: nothing to reset to`] };
    // The file's entry comes back only if it fits the directory in force: a tenant created since
    // with one of its hosts would otherwise be pushed out by it (file tenants take hosts first).
    await this.#building;
    const verdict = this.#snap.judge(id, entry);
    if (verdict) return { ok: false, problems: verdict.problems, conflict: true };
    await this.#commit({ kind: 'tenant', id, action: 'reset', patch: { record: null, deleted: false, status: null, authSince: null } }, actor);
    return { ok: true };
  }

  async diffFile(next: FileDirectory): Promise<FileDiff> {
    const base = this.#file;
    // Read against the running file, its reader listed what changed (config/read-worker.ts).
    const found = changesOf(next.tenants);
    const changed = found?.base === base.tenants ? found.changed : await stepInSlices(tenantChanges(base.tenants, next.tenants));
    return { base, next: next.tenants, changed, plans: !sameValue(base.plans, next.plans) };
  }

  overridden(): string[] {
    const ids = new Set([...this.#snap.fromRecord, ...this.#records.deleted]);
    for (const id in this.#records.status) ids.add(id);
    return [...ids].filter((id) => this.#file.tenants[id] !== undefined);
  }

  async prepareFile(reloaded: FileDirectory, diff: FileDiff): Promise<FileDiff> {
    if (!diff.plans || diff.base !== this.#file) return diff;
    const over = this.#snap;
    const edits = this.#edits;
    const index = new TenantIndex(this.#fileOf(reloaded), this.#records, over, this.#addresses.identitiesOf);
    await stepInSlices(index.build());
    const touched = await stepInSlices(changedTenantsInSteps(over, index));
    return { ...diff, built: { index, touched, over, edits } };
  }

  /** The directory's file for a reloaded one: a reload applies the global auth settings too, which tenants' own are checked against. */
  #fileOf(reloaded: FileDirectory): FileDirectory {
    return { plans: reloaded.plans, tenants: reloaded.tenants, auth: reloaded.auth ?? this.#file.auth };
  }

  /** A reloaded file applied by a full build (prepareFile's, or one made now), checked whole before it is swapped in. */
  #reloadWhole(file: FileDirectory, built?: { readonly index: TenantIndex; readonly touched: ReadonlySet<string> }): WriteResult {
    const next = built?.index ?? new TenantIndex(file, this.#records, this.#snap, this.#addresses.identitiesOf);
    if (built === undefined) for (const _ of next.build());
    const problems = fileProblems(next.rejected);
    if (problems.length > 0) return { ok: false, problems };
    // prepareFile's equal copy of `file`: the directory's file and its index's are one object.
    this.#file = next.file;
    this.#install(next, built?.touched ?? changedTenants(this.#snap, next));
    return { ok: true };
  }

  reloadFile(reloaded: FileDirectory, diff?: FileDiff): WriteResult {
    const file = this.#fileOf(reloaded);
    const before = this.#file;
    // A comparison made against another file than the running one (two reloads crossed) is made again.
    const known = diff !== undefined && diff.base === before && diff.next === reloaded.tenants ? diff : undefined;
    if (known?.plans ?? !sameValue(before.plans, file.plans)) {
      // A plan every tenant may use changed: a full build, checked whole before it is swapped in;
      // the one prepareFile made when nothing changed since it began.
      const built = known?.built;
      const current = built !== undefined && built.over === this.#snap && built.edits === this.#edits;
      return this.#reloadWhole(file, current ? built : undefined);
    }
    // Only the tenants whose entry differs are placed again; the first refused entry undoes them all.
    const changed = known?.changed ?? runSteps(tenantChanges(before.tenants, file.tenants));
    this.#edits++;
    if (changed.length === 0) {
      this.#file = file;
      this.#snap.file = file;
      this.#snap.fileChanged();
      this.#adoptSoon(file, new Set());
      return { ok: true };
    }
    const apply = (f: FileDirectory): { problems: string[]; whole: boolean } => {
      this.#snap.file = f;
      this.#snap.fileChanged();
      let whole = false;
      const problems: string[] = [];
      for (const id of changed) if (!this.#snap.place(id)) whole = true;
      for (const id of changed) problems.push(...fileProblems(this.#snap.rejectionsOf(`tenant:${id}`)));
      return { problems, whole };
    };
    const snapBefore = new Map(changed.map((id) => [id, this.#snap.byId.get(id)]));
    const tried = apply(file);
    if (tried.whole || tried.problems.length > 0) {
      apply(before);
      if (tried.problems.length > 0 && !tried.whole) return { ok: false, problems: tried.problems };
      // The result depends on other tenants' order: a full build decides, as at start.
      return this.#reloadWhole(file);
    }
    this.#file = file;
    this.#adoptSoon(file, new Set(changed));
    const touched = new Set(changed.filter((id) => snapBefore.get(id) !== this.#snap.byId.get(id)));
    this.#changed(touched, this.#snap.rejected);
    return { ok: true };
  }

  /**
   * Points the unchanged tenants of a reloaded file at the new file's objects, in slices, so a
   * later full build lends their compiled tenants; none once the file or the index was replaced.
   */
  #adoptSoon(file: FileDirectory, differs: ReadonlySet<string>): void {
    const snap = this.#snap;
    void eachTenant(file.tenants, (id, raw) => {
      if (this.#file === file && this.#snap === snap && !differs.has(id)) snap.adopt(id, raw);
    });
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

  tenantsByPlan(): ReadonlyMap<string, number> {
    return this.#snap.planTenants;
  }

  planById(id: string): Plan | undefined {
    return this.#snap.plans.get(id);
  }

  all(): Iterable<Tenant> {
    return this.#snap.byId.values();
  }

  async start(refreshMs: number): Promise<void> {
    if (this.#durable) {
      // Read at start without the quiet retry: a store that cannot be read fails the start.
      await this.refresh();
      for (const prefix of ['tenant:', 'plan:']) this.#durable.feed.subscribe(prefix, (changes) => this.#onChanges(changes));
      return;
    }
    const redis = this.#redis;
    if (!redis) return;
    // A caller's client was waited for by the caller; waiting again only slows a boot with Redis down.
    if (this.#owned) await whenReady(redis, this.#readyMs);
    // Start reads everything after the first attempt; any later subscription (a reconnect, or a
    // first attempt that failed) reloads, as changes published meanwhile were missed.
    let starting = true;
    const sub = subscriberFor(redis, this.#seeds, [this.#keys.changes], {
      subscribed: () => {
        if (!starting) void this.#refreshQuietly();
      },
      failed: (err) => this.#log.warn({ err }, 'tenant store: subscribe failed; relying on periodic refresh until it is tried again'),
    });
    this.#subscriber = sub;
    sub.connection.on('message', (channel: string, message: string) => {
      if (channel !== this.#keys.changes) return;
      this.#messages = this.#messages.then(() => this.#onMessage(message)).catch(() => this.#retrySoon());
    });
    await sub.first;
    starting = false;
    await this.#refreshQuietly();
    // Every period the version is checked (one GET); every FULL_EVERY periods everything is read
    // again, in slices, for writes that did not count the version (an older instance, redis-cli).
    let ticks = 0;
    this.#timer = setInterval(() => void (++ticks % FULL_EVERY === 0 ? this.#refreshQuietly() : this.#checkVersion()), refreshMs);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    if (this.#retry) clearTimeout(this.#retry);
    this.#timer = null;
    this.#retry = null;
    this.#subscriber?.close();
    this.#subscriber = null;
    await this.#inflight?.catch(() => {});
    await this.#building?.catch(() => {});
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

  async putTenant(id: string, raw: unknown, actor = 'admin'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const parsed = tenantSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error) };
    // The record is judged by the rules every build runs, against the directory in force.
    await this.#addresses.learn(parsed.data.brokers);
    await this.#building;
    const verdict = this.#snap.judge(id, parsed.data);
    if (verdict) return verdict.conflict ? { ok: false, problems: verdict.problems, conflict: true } : { ok: false, problems: verdict.problems };
    const text = JSON.stringify(parsed.data);
    // A record's `auth` keeps its age while unchanged: the older of two holders keeps a shared key
    // (src/auth/key-claims.ts). Compared as values: the store hands records back with its own key order.
    const before = this.#records.tenants.get(id);
    const sameAuth = before !== undefined && sameValue((JSON.parse(before) as RawTenant).auth ?? null, parsed.data.auth ?? null);
    const patch = { record: text, deleted: false, status: null, ...(sameAuth ? {} : { authSince: String(Date.now()) }) };
    await this.#commit({ kind: 'tenant', id, action: 'put', patch }, actor);
    return { ok: true };
  }

  async deleteTenant(id: string, actor = 'admin'): Promise<boolean> {
    if (this.#cannotWrite(id)) return false;
    const existed = this.#snap.byId.has(id);
    const patch = { record: null, deleted: true, status: null, storage: null, authSince: null };
    await this.#commit({ kind: 'tenant', id, action: 'delete', patch }, actor);
    return existed;
  }

  async putPlan(id: string, raw: unknown, actor = 'admin'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    const parsed = planSchema.safeParse(raw);
    if (!parsed.success) return { ok: false, problems: problemsOf(parsed.error) };
    await this.#commit({ kind: 'plan', id, action: 'put', record: JSON.stringify(parsed.data satisfies RawPlan) }, actor);
    return { ok: true };
  }

  async setStatus(id: string, status: 'active' | 'suspended', actor = 'admin'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    if (!this.#snap.byId.has(id)) return { ok: false, problems: [`unknown tenant "${id}"`] };
    await this.#commit({ kind: 'tenant', id, action: status === 'active' ? 'resume' : 'suspend', patch: { status } }, actor);
    return { ok: true };
  }

  async setStorageUsed(id: string, bytes: number, actor = 'admin'): Promise<WriteResult> {
    const refusal = this.#cannotWrite(id);
    if (refusal) return refusal;
    if (!Number.isSafeInteger(bytes) || bytes < 0) return { ok: false, problems: ['bytes: must be a non-negative integer'] };
    await this.#commit({ kind: 'tenant', id, action: 'storage', patch: { storage: String(bytes) } }, actor);
    return { ok: true };
  }

  /**
   * Applies a write. With the store: there, with its change, in one transaction; peers are poked,
   * and this instance's feed places it (the one way changes arrive, in the log's order), so the
   * writer reads its own write. With Redis: there (counting the directory version and telling
   * every instance which tenant or plan changed), then here. In memory: here.
   */
  async #commit(w: RecordWrite, actor: string): Promise<void> {
    const what = subjectOf(w);
    if (this.#durable) {
      const seq = await writeToStore(this.#durable.store, w, actor);
      await this.#durable.announce(seq, what);
      await this.#durable.feed.poke();
      return;
    }
    if (this.#redis) {
      const replies = await redisWrite(this.#redis, this.#keys, w).incr(this.#keys.version).exec();
      const last = replies?.[replies.length - 1];
      if (!last || last[0]) throw last?.[0] ?? new Error('tenant store: write not applied');
      const version = Number(last[1]);
      // Another write landed in between: its message may not be here yet, so read everything.
      const inOrder = version === this.#version + 1;
      if (inOrder) this.#version = version;
      await this.#redis.publish(this.#keys.changes, `${version} ${what}`);
      if (!inOrder) return this.refresh();
    }
    applyWrite(this.#records, w);
    this.#edits++;
    await this.#apply(what);
  }

  /**
   * Changes read from the store's log (this instance's and its peers'): the rows they name are
   * read again and placed, one batch at a time in the log's order, after any full read in
   * progress. A failed read is made good by a full read soon after.
   */
  #onChanges(changes: readonly Change[]): Promise<void> {
    const run = this.#messages.then(async () => {
      const tenants = new Set<string>();
      const plans = new Set<string>();
      for (const c of changes) {
        if (c.subject.startsWith('tenant:')) tenants.add(c.subject.slice('tenant:'.length));
        else if (c.subject.startsWith('plan:')) plans.add(c.subject.slice('plan:'.length));
      }
      let writes: RecordWrite[];
      try {
        writes = await readFromStore(this.#durable!.store, [...tenants], [...plans]);
      } catch {
        this.#retrySoon();
        return;
      }
      await this.#addresses.learn(brokerUrlsOf(writes.flatMap((w) => (w.kind === 'tenant' && typeof w.patch.record === 'string' ? [w.patch.record] : []))));
      for (const w of writes) applyWrite(this.#records, w);
      this.#edits++;
      if (plans.size > 0) return this.#rebuild(this.#records);
      for (const id of tenants) await this.#apply(`tenant:${id}`);
    });
    this.#messages = run.catch(() => this.#retrySoon());
    return run;
  }

  /** Places the tenant `what` names again (`tenant:ID`), or builds everything again (`plan:ID`). */
  async #apply(what: string): Promise<void> {
    await this.#building;
    if (what.startsWith('tenant:')) {
      const id = what.slice('tenant:'.length);
      if (this.#building) this.#placedDuringBuild.add(id);
      const snap = this.#snap;
      const before = [snap.byId.get(id), snap.storage.get(id), snap.blocked.has(id)] as const;
      const placed = snap.place(id);
      // A place() that leaves the outcome to a full build may have put a version in force, served
      // until the build replaces it: subscribers hear of it now, so the build's change undoes it.
      const tenant = snap.byId.get(id);
      const gate = before[1] !== snap.storage.get(id) || before[2] !== snap.blocked.has(id);
      this.#changed(before[0] === tenant ? new Set() : new Set([id]), snap.rejected, gate);
      if (placed) return;
    }
    await this.#rebuild(this.#records);
  }

  /** A message from another instance: `VERSION tenant:ID` or `VERSION plan:ID`; anything else, or a gap, reloads everything. */
  async #onMessage(message: string): Promise<void> {
    const space = message.indexOf(' ');
    const version = Number(message.slice(0, space));
    const what = message.slice(space + 1);
    if (space > 0 && Number.isSafeInteger(version) && version <= this.#version) return;
    if (space <= 0 || version !== this.#version + 1 || !this.#redis || (!what.startsWith('tenant:') && !what.startsWith('plan:'))) {
      await this.#refreshQuietly();
      return;
    }
    const k = this.#keys;
    const r = this.#records;
    if (what.startsWith('plan:')) {
      const id = what.slice('plan:'.length);
      const text = await this.#redis.get(k.plan(id));
      if (text === null) r.plans.delete(id);
      else r.plans.set(id, text);
    } else {
      const id = what.slice('tenant:'.length);
      const replies = await this.#redis.multi().get(k.tenant(id)).sismember(k.deleted, id).hget(k.status, id).hget(k.storage, id).hget(k.authSince, id).exec();
      const [text, deleted, status, storage, since] = (replies ?? []).map(([err, value]) => {
        if (err) throw err;
        return value;
      }) as [string | null, number, string | null, string | null, string | null];
      if (text !== null) await this.#addresses.learn(brokerUrlsOf([text]));
      if (r.authSince) {
        if (since === null) delete r.authSince[id];
        else r.authSince[id] = since;
      }
      if (text === null) r.tenants.delete(id);
      else r.tenants.set(id, text);
      if (deleted === 1) r.deleted.add(id);
      else r.deleted.delete(id);
      if (status === null) delete r.status[id];
      else r.status[id] = status;
      if (storage === null) delete r.storage[id];
      else r.storage[id] = storage;
    }
    this.#edits++;
    // A write between the message and these reads is applied now and again by its own message: harmless.
    if (version !== this.#version + 1) return this.#refreshQuietly();
    this.#version = version;
    await this.#apply(what);
  }

  /** The safety net: reloads everything when the directory version moved past what was applied. */
  async #checkVersion(): Promise<void> {
    try {
      const v = Number((await this.#redis!.get(this.#keys.version)) ?? 0);
      if (v !== this.#version) await this.#refreshQuietly();
    } catch {
      this.#retrySoon();
    }
  }

  /** The refusal when writing is impossible (no Redis) or the id unusable; null to go ahead. */
  #cannotWrite(id: string): WriteResult | null {
    if (this.backing === 'static') return { ok: false, problems: ['no Redis configured: tenants and plans come from the config file only'] };
    if (!ID_PATTERN.test(id)) return { ok: false, problems: [`id: must match ${ID_PATTERN.source}`] };
    return null;
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

  /** Reads every record and builds the directory again from them (the start, a missed message). */
  async #load(): Promise<void> {
    if (this.#durable) {
      // In the queue with the feed's batches: a batch read after this snapshot is placed after it.
      const run = this.#messages.then(async () => {
        const { records } = await loadFromStore(this.#durable!.store);
        await this.#addresses.learn(brokerUrlsOf(records.tenants.values()));
        await this.#applyRecords(records);
      });
      this.#messages = run.catch(() => {});
      return run;
    }
    const { version, records } = await loadFromRedis(this.#redis!, this.#keys);
    this.#version = version;
    await this.#addresses.learn(brokerUrlsOf(records.tenants.values()));
    await this.#applyRecords(records);
  }

  /**
   * Swaps in records read whole: the tenants whose record, tombstone, status or storage differ are
   * placed again; a changed plan, or a change whose outcome depends on other tenants, builds everything.
   */
  async #applyRecords(next: RedisRecords): Promise<void> {
    await this.#building;
    const now = this.#records;
    if (!sameMap(now.plans, next.plans)) return this.#rebuild(next);
    const changed = new Set<string>();
    const diffMap = (a: ReadonlyMap<string, string>, b: ReadonlyMap<string, string>): void => {
      for (const [id, v] of a) if (b.get(id) !== v) changed.add(id);
      for (const id of b.keys()) if (!a.has(id)) changed.add(id);
    };
    const diffHash = (a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): void => {
      for (const id in a) if (b[id] !== a[id]) changed.add(id);
      for (const id in b) if (a[id] === undefined) changed.add(id);
    };
    diffMap(now.tenants, next.tenants);
    diffHash(now.status, next.status);
    diffHash(now.storage, next.storage);
    diffHash(now.authSince ?? {}, next.authSince ?? {});
    for (const id of now.deleted) if (!next.deleted.has(id)) changed.add(id);
    for (const id of next.deleted) if (!now.deleted.has(id)) changed.add(id);
    if (changed.size === 0) return;
    const snap = this.#snap;
    snap.redis = next;
    this.#edits++;
    const before = new Map([...changed].map((id) => [id, snap.byId.get(id)]));
    let whole = false;
    for (const id of changed) {
      if (snap.place(id)) continue;
      whole = true;
      break;
    }
    // Heard of before a full build too: what was placed is served until the build replaces it.
    this.#changed(new Set([...changed].filter((id) => before.get(id) !== snap.byId.get(id))), snap.rejected, true);
    if (whole) return this.#rebuild(next);
  }

  /**
   * Builds the whole directory from `records` in slices of about SLICE_MS, yielding to the event
   * loop between them, and swaps it in; tenants placed meanwhile in the old one are placed again.
   */
  #rebuild(records: RedisRecords): Promise<void> {
    const run = async (): Promise<void> => {
      await this.#building?.catch(() => {});
      let next: TenantIndex;
      // A file reloaded meanwhile went to the index in force, not to this one: built again from it.
      do {
        next = new TenantIndex(this.#file, records, this.#snap, this.#addresses.identitiesOf);
        this.#placedDuringBuild = new Set();
        await stepInSlices(next.build());
      } while (next.file !== this.#file);
      let whole = false;
      for (const id of this.#placedDuringBuild) if (!next.place(id)) whole = true;
      if (whole) for (const _ of next.build());
      this.#install(next, changedTenants(this.#snap, next));
    };
    const building = run().finally(() => {
      if (this.#building === building) this.#building = null;
    });
    this.#building = building;
    return building;
  }

  /** Swaps a new index in and tells subscribers what changed. */
  #install(next: TenantIndex, touched: ReadonlySet<string>): void {
    const before = this.#snap;
    this.#snap = next;
    // Tenants touched already tell subscribers; only without them are the plans and storage compared.
    this.#changed(touched, next.rejected, touched.size === 0 && snapshotChanged(before, next), brokersSwapped(before, next));
  }

  /** Logs rejected records once, and tells subscribers when something changed. */
  #changed(touched: ReadonlySet<string>, rejected: ReturnType<TenantIndex['rejectionsOf']>, other = false, swapped?: BrokerChange | null): void {
    const reported = new Set<string>();
    for (const r of rejected) {
      // A file entry is rejected at run time only when its record lost a host and the file's version clashes too.
      const key = r.source === 'file' ? `config:tenants.${r.id}` : r.kind === 'tenant' ? this.#keys.tenant(r.id) : this.#keys.plan(r.id);
      const line = `${key}\n${r.problems.join('\n')}`;
      reported.add(line);
      if (!this.#reported.has(line)) this.#log.warn({ key, problems: r.problems }, 'tenant store: record refused by the directory; the previous version stays');
    }
    this.#reported = reported;
    const brokers = swapped !== undefined ? swapped : brokerChange(this.#snap.brokerUrls, this.#snap.brokerMoves);
    this.#snap.brokerMoves.clear();
    if (touched.size === 0 && !other && brokers === null) return;
    this.#generation++;
    const change: DirectoryChange = { tenants: touched, brokers };
    for (const listener of this.#listeners) {
      try {
        listener(change);
      } catch (err) {
        this.#log.error({ err }, 'tenant store: change listener failed');
      }
    }
  }

  /** Counts the edits of the index in force's inputs (records, file) in place: a build over it made before one is stale. */
  #edits = 0;
}

/** Periods between two full reads of the directory (the others only check its version). */
const FULL_EVERY = 6;

/** Builds the store: Redis-backed (started: subscribed, loaded, refreshing) or the file alone. */
export async function createTenantStore(cfg: TenantStoreSettings, deps: TenantStoreDeps): Promise<TenantStore> {
  // With the store, records never touch Redis: the directory needs no connection of its own.
  const redis = deps.store ? null : (deps.redis ?? connectRedis(cfg.redis));
  const owned = !deps.redis && redis !== null;
  const store = new Directory(cfg, deps.log, redis, owned, deps.memoryOverrides === true, deps.addresses ?? new BrokerAddresses(), deps.store ?? null);
  await store.start(deps.refreshMs ?? 5000);
  return store;
}
