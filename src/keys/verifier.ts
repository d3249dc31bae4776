/**
 * Tenant API keys on the request path (docs/api-keys.md). A key is looked up by its id (O(1): a
 * map here, one GET in Redis on a miss), its SHA-256 compared in constant time, and it yields the
 * identity a token would: its tenant, its roles, a subject naming the key. So role sets, limits,
 * quotas, metering and the access log work unchanged.
 *
 * Each instance caches what it read, keyed by key id (never the key): a found key for
 * FOUND_TTL_MS, an unknown id for MISSING_TTL_MS. A revocation reaches every instance's cache
 * through the store's pub/sub; a reconnect of that subscriber drops the whole cache (revocations
 * may have been missed), and the TTL bounds what a lost message can keep alive. A lookup that
 * started before a revocation arrived is answered but not cached (the epoch check), so a revoked
 * key cannot be re-cached by a read that raced it.
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

interface Entry {
  readonly record: ApiKeyRecord | null;
  readonly identity: Identity | null;
}

const MISSING: Entry = { record: null, identity: null };
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

export class ApiKeyVerifier implements TokenVerifier {
  readonly #store: ApiKeyStore;
  readonly #clock: () => number;
  readonly #log: Logger;
  readonly #cache = new ExpiringMap<string, Entry>(CACHE_ENTRIES);
  readonly #touched = new ExpiringMap<string, true>(CACHE_ENTRIES);
  readonly #loading = new Map<string, Promise<Entry>>();
  /** Keys declared in the configuration file, by id: they need no store. */
  #file: ReadonlyMap<string, Entry> = new Map();
  /** Bumped by every revocation: a load that started in an older epoch is not cached. */
  #epoch = 0;

  constructor(store: ApiKeyStore, deps: { clock: () => number; log: Logger }) {
    this.#store = store;
    this.#clock = deps.clock;
    this.#log = deps.log;
    store.onRevoked((id) => {
      this.#epoch++;
      if (id === null) this.#cache.clear();
      else this.#cache.delete(id);
    });
  }

  /** Replaces the keys declared in the configuration file (at start and on a reload). */
  setFileKeys(records: readonly ApiKeyRecord[]): void {
    this.#file = new Map(records.map((r) => [r.id, { record: r, identity: identityOf(r) }]));
  }

  /** The keys declared in the configuration file for a tenant. */
  fileKeys(tenant: string): ApiKeyRecord[] {
    const out: ApiKeyRecord[] = [];
    for (const { record } of this.#file.values()) if (record!.tenant === tenant) out.push(record!);
    return out;
  }

  cached(token: string): Identity | undefined {
    const id = keyId(token);
    if (id === null) return undefined;
    const now = this.#clock();
    const e = this.#file.get(id) ?? this.#cache.get(id, now);
    return e === undefined ? undefined : (this.#accept(e, token, now) ?? undefined);
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

  /** The identity of an entry for this key: null unless found, unexpired and matching. */
  #accept(e: Entry, token: string, now: number): Identity | null {
    const r = e.record;
    if (r === null || (r.expiresAt !== null && now >= r.expiresAt) || !keyMatches(token, r.hash)) return null;
    if (this.#touched.get(r.id, now) === undefined) {
      this.#touched.set(r.id, true, now + TOUCH_EVERY_MS, now);
      this.#store.touch(r.id, now).catch((err: unknown) => this.#log.debug({ err, key: r.id }, 'API key: last use not recorded'));
    }
    return e.identity;
  }

  /** The cached entry, else one load per id at a time; undefined when the store cannot answer. */
  async #entry(id: string): Promise<Entry | undefined> {
    const now = this.#clock();
    const hit = this.#cache.get(id, now);
    if (hit !== undefined) return hit;
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
    const epoch = this.#epoch;
    const record = await this.#store.get(id);
    const e = record === null ? MISSING : { record, identity: identityOf(record) };
    const now = this.#clock();
    if (epoch === this.#epoch) this.#cache.set(id, e, now + (record === null ? MISSING_TTL_MS : FOUND_TTL_MS), now);
    return e;
  }

  async start(): Promise<void> {}

  close(): void {}

  get cacheBytes(): number {
    return 0;
  }
}
