/**
 * Tenant API keys on the request path (docs/api-keys.md). A key is looked up by its id (O(1): a
 * map here, one GET in Redis on a miss), its SHA-256 compared in constant time, and it yields the
 * identity a token would: its tenant, its roles, a subject naming the key. So role sets, limits,
 * quotas, metering and the access log work unchanged.
 *
 * Each instance caches what it read by key id: a found key for FOUND_TTL_MS, an unknown id for
 * MISSING_TTL_MS; a key whose hash matched is remembered by the key itself, in memory only (as the
 * token cache holds tokens), so a repeat costs a map lookup rather than a SHA-256. A revocation reaches every instance's cache
 * through the store's pub/sub; a reconnect of that subscriber, or a revocation check that finds
 * revocations it did not hear of, drops the whole cache (revocations may have been missed), so a
 * lost message keeps a key alive for at most the check's period. A tenant just removed has its
 * keys refused here at once, before the store confirms their revocation (lifetime.ts). A lookup that
 * started before its key's revocation arrived is refused and not cached (the revocation's epoch),
 * so a revoked key cannot be re-cached by a read that raced it; one that started before a
 * reconnect is answered but not cached.
 *
 * It is a TokenVerifier: a cache hit is synchronous; a miss passes the per-client signature gate
 * first, so failed keys count toward the failed-authentication throttle as bad tokens do.
 */
import { ExpiringMap } from '../cache/expiring-map.js';
import { edgeError, type EdgeError } from '../errors.js';
import type { Identity, SignatureGate, TokenVerifier } from '../auth/jwt.js';
import type { Logger } from '../observability/log.js';
import { keyId, keyMatches } from './format.js';
import type { ApiKeyRecord, ApiKeyStore } from './store.js';

const FOUND_TTL_MS = 30_000;
const MISSING_TTL_MS = 5_000;
/** Last use is written at most this often per key and instance. */
const TOUCH_EVERY_MS = 60_000;
const CACHE_ENTRIES = 100_000;

/** What this instance knows of a key id; `revoked` is set when a revocation arrives, so every copy of the entry sees it. */
interface Entry {
  readonly id: string;
  readonly record: ApiKeyRecord | null;
  readonly identity: Identity | null;
  revoked: boolean;
  /** When this instance last recorded a use of the key (ms). */
  touchedAt: number;
}

const INVALID = 'invalid API key';

function identityOf(r: ApiKeyRecord): Identity {
  return {
    // Never the key: nothing downstream (logs, an upstream Authorization) may carry it.
    token: '',
    sub: `key:${r.id}`,
    roles: new Set(r.roles),
    tenant: r.tenant,
    expMs: r.expiresAt,
    claims: {},
    rolesRead: `roles of API key ${r.id}`,
  };
}

function entryOf(id: string, record: ApiKeyRecord | null): Entry {
  return { id, record, identity: record === null ? null : identityOf(record), revoked: false, touchedAt: 0 };
}

export class ApiKeyVerifier implements TokenVerifier {
  readonly #store: ApiKeyStore;
  readonly #clock: () => number;
  readonly #log: Logger;
  /** Keys read from the store, by key id. */
  readonly #byId = new ExpiringMap<string, Entry>(CACHE_ENTRIES);
  /** Ids the store does not have, apart: junk ids must not push real keys out of #byId. */
  readonly #unknown = new ExpiringMap<string, true>(CACHE_ENTRIES);
  /**
   * Keys whose hash matched, by the presented key itself (as the token cache holds tokens: in
   * memory only), so a repeat costs map lookups, not a SHA-256. A hit counts only while it is
   * still its id's current entry, so it never outlives a revocation or its entry's expiry.
   */
  readonly #matched = new ExpiringMap<string, Entry>(CACHE_ENTRIES);
  /** Ids whose use was recorded lately, across reloads of their entry. */
  readonly #touched = new ExpiringMap<string, number>(CACHE_ENTRIES);
  readonly #loading = new Map<string, Promise<Entry>>();
  /** Keys declared in the configuration file, by id: they need no store. */
  #file: ReadonlyMap<string, Entry> = new Map();
  /** Counts revocations; a read compares it with what it saw when it started. */
  #epoch = 0;
  /** The epoch at which each id was revoked lately. */
  readonly #revoked = new ExpiringMap<string, number>(CACHE_ENTRIES);
  /** The epoch of the last "revocations may have been missed" (a reconnect of the feed). */
  #cleared = 0;
  /** Tenants removed whose keys' revocation is not confirmed yet: when each was removed (ms). */
  readonly #gone = new Map<string, number>();

  constructor(store: ApiKeyStore, deps: { clock: () => number; log: Logger }) {
    this.#store = store;
    this.#clock = deps.clock;
    this.#log = deps.log;
    store.onRevoked((id) => {
      const epoch = ++this.#epoch;
      const now = this.#clock();
      if (id === null) {
        this.#cleared = epoch;
        this.#byId.clear();
        this.#unknown.clear();
        this.#matched.clear();
        return;
      }
      this.#revoked.set(id, epoch, now + 2 * FOUND_TTL_MS, now);
      const e = this.#byId.get(id, now);
      if (e !== undefined) e.revoked = true;
      this.#byId.delete(id);
      // A key the store learnt of since (a create heard from the change log) is read again, not "unknown" for 5 s.
      this.#unknown.delete(id);
    });
  }

  /**
   * A tenant left the directory at `at`: the keys it had (created up to then) are refused from
   * now on, whatever the store and this cache still hold, until `forgetRemoval` (a while after
   * they were revoked, lifetime.ts).
   */
  tenantRemoved(tenant: string, at: number): void {
    this.#gone.set(tenant, Math.max(at, this.#gone.get(tenant) ?? at));
  }

  /** The removed tenant's keys are revoked in the store: keys of a later tenant under its id are its own. */
  forgetRemoval(tenant: string, at: number): void {
    if (this.#gone.get(tenant) === at) this.#gone.delete(tenant);
  }

  /** Replaces the keys declared in the configuration file (at start and on a reload). */
  setFileKeys(records: readonly ApiKeyRecord[]): void {
    for (const e of this.#file.values()) e.revoked = true;
    this.#file = new Map(records.map((r) => [r.id, entryOf(r.id, r)]));
  }

  /** The keys declared in the configuration file for a tenant. */
  fileKeys(tenant: string): ApiKeyRecord[] {
    const out: ApiKeyRecord[] = [];
    for (const { record } of this.#file.values()) if (record!.tenant === tenant) out.push(record!);
    return out;
  }

  cached(token: string): Identity | undefined {
    const now = this.#clock();
    const hit = this.#matched.get(token, now);
    if (hit !== undefined && this.#current(hit.id, now) === hit && this.#usable(hit, now)) return this.#used(hit, now);
    const id = keyId(token);
    if (id === null) return undefined;
    const e = this.#current(id, now);
    return e === undefined ? undefined : (this.#accept(e, token, now) ?? undefined);
  }

  /** The entry in force for an id: the file's, else the one read from the store. */
  #current(id: string, now: number): Entry | undefined {
    return this.#file.get(id) ?? this.#byId.get(id, now);
  }

  async verify(token: string, gate?: SignatureGate): Promise<Identity | EdgeError> {
    const refused = gate ? await gate.admit() : null;
    if (refused) return refused;
    const id = keyId(token);
    let identity: Identity | null = null;
    if (id !== null) {
      const e = this.#file.get(id) ?? (await this.#entry(id));
      if (e === undefined) return edgeError('limiter_unavailable', 'API keys unavailable (Redis)');
      identity = this.#accept(e, token, this.#clock());
    }
    gate?.settled(identity !== null);
    return identity ?? edgeError('unauthorized', INVALID);
  }

  #usable(e: Entry, now: number): boolean {
    const r = e.record;
    return r !== null && !e.revoked && (r.expiresAt === null || now < r.expiresAt) && !this.#formerTenant(r);
  }

  /** A key made for a tenant since removed (a former incarnation of its id), its revocation still on the way. */
  #formerTenant(r: ApiKeyRecord): boolean {
    if (this.#gone.size === 0 || r.createdAt === null) return false;
    const removed = this.#gone.get(r.tenant);
    return removed !== undefined && r.createdAt <= removed;
  }

  /** The identity of an entry for this key: null unless found, unrevoked, unexpired and matching. */
  #accept(e: Entry, token: string, now: number): Identity | null {
    if (!this.#usable(e, now) || !keyMatches(token, e.record!.hash)) return null;
    this.#matched.set(token, e, now + FOUND_TTL_MS, now);
    return this.#used(e, now);
  }

  /** Records a use at most once a minute per key (a Redis write, not awaited). */
  #used(e: Entry, now: number): Identity {
    if (now - e.touchedAt >= TOUCH_EVERY_MS) {
      const id = e.record!.id;
      const last = this.#touched.get(id, now);
      if (last === undefined) {
        this.#touched.set(id, now, now + TOUCH_EVERY_MS, now);
        this.#store.touch(id, now).catch((err: unknown) => this.#log.debug({ err, key: id }, 'API key: last use not recorded'));
      }
      e.touchedAt = last ?? now;
    }
    return e.identity!;
  }

  /** The cached entry, else one load per id at a time; undefined when the store cannot answer. */
  async #entry(id: string): Promise<Entry | undefined> {
    const now = this.#clock();
    const hit = this.#byId.get(id, now);
    if (hit !== undefined) return hit;
    if (this.#unknown.get(id, now)) return entryOf(id, null);
    let loading = this.#loading.get(id);
    if (loading === undefined) {
      loading = this.#load(id).finally(() => this.#loading.delete(id));
      this.#loading.set(id, loading);
    }
    return loading.catch((err: unknown) => {
      this.#log.warn({ err, key: id }, 'API key lookup failed');
      return undefined;
    });
  }

  async #load(id: string): Promise<Entry> {
    const started = this.#epoch;
    const e = entryOf(id, await this.#store.get(id));
    const now = this.#clock();
    // This id revoked while the read was out: its answer may predate the revocation.
    if ((this.#revoked.get(id, now) ?? 0) > started) e.revoked = true;
    // Revocations may have been missed meanwhile: answer, but keep nothing.
    else if (this.#cleared <= started) {
      if (e.record === null) this.#unknown.set(id, true, now + MISSING_TTL_MS, now);
      else this.#byId.set(id, e, now + FOUND_TTL_MS, now);
    }
    return e;
  }

  async start(): Promise<void> {}

  close(): void {}

  get cacheBytes(): number {
    return 0;
  }
}
