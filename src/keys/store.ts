/**
 * Where tenant API keys are kept (docs/api-keys.md): in the tenant directory's Redis (layout in
 * src/redis/keys.ts), or in this process when no Redis is configured (one instance; the config
 * file's `apiKeys:` are the durable form there). A record holds the key's SHA-256, never the key.
 * A revoke is counted (`<prefix>{keys}:revocations`) and published on `<prefix>keys-revoked`, so
 * every instance drops its cached copy; each instance also reads the count every few seconds, so a
 * message it missed costs at most that period, not a cache entry's life.
 */
import { subscriberFor, type RedisClient, type Subscriber } from '../redis/connection.js';
import { apiKeyKeys, type ApiKeyKeys } from '../redis/keys.js';
import type { RawConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';

/** A key as stored: what the request path needs, and what the admin list shows. */
export interface ApiKeyRecord {
  readonly id: string;
  readonly tenant: string;
  readonly name: string;
  readonly roles: readonly string[];
  /** Null for a key declared in the configuration file. */
  readonly createdAt: number | null;
  readonly expiresAt: number | null;
  /** SHA-256 of the whole key, hex. */
  readonly hash: string;
}

/** A record with its last use, for lists. */
export interface ListedKey extends ApiKeyRecord {
  readonly lastUsedAt: number | null;
}

export interface ApiKeyStore {
  /** 'store': the durable store (store-keys.ts); 'redis': shared by every instance; 'memory': this process only. */
  readonly backing: 'store' | 'redis' | 'memory';
  /**
   * Stores a new key unless its tenant already has `max` (false then). `actor` (who asked: an admin
   * token's id) is what a store with a change log records; the others ignore it.
   */
  add(record: ApiKeyRecord, max: number, actor?: string): Promise<boolean>;
  get(id: string): Promise<ApiKeyRecord | null>;
  list(tenant: string): Promise<ListedKey[]>;
  /** Removes a key of `tenant` and tells every instance; false when the tenant has no such key. */
  revoke(tenant: string, id: string, actor?: string): Promise<boolean>;
  /**
   * Revokes every key of a tenant created at or before `upTo` (ms; default every key): it was
   * removed, and a tenant made later under its id must not inherit them. Their ids.
   */
  revokeAll(tenant: string, upTo?: number, actor?: string): Promise<string[]>;
  /** Records a use (callers write at most once a minute per key). */
  touch(id: string, at: number): Promise<void>;
  /**
   * `listener(id)` on every revocation (and, for the store's copy in memory, when a key created
   * elsewhere becomes known), `listener(null)` when some may have been missed (a reconnect).
   */
  onRevoked(listener: (id: string | null) => void): void;
  /** When this instance last knew it had heard of every revocation (Date.now() ms): the revocation check's last success. */
  readonly checkedAt: number;
  close(): Promise<void>;
}

/** How often an instance checks the revocation count: the bound on a missed revocation message. */
export const REVOCATION_CHECK_MS = 5000;

/** Whether a key belongs to what revokeAll(…, upTo) revokes (a malformed record always does). */
function createdBy(r: ApiKeyRecord | null, upTo: number): boolean {
  return r === null || r.createdAt === null || r.createdAt <= upTo;
}

/** Parses a stored record; null for anything malformed (a record written by hand). */
export function parseRecord(text: string | null): ApiKeyRecord | null {
  if (text === null) return null;
  try {
    const r = JSON.parse(text) as Partial<ApiKeyRecord>;
    const ok =
      typeof r.id === 'string' &&
      typeof r.tenant === 'string' &&
      typeof r.name === 'string' &&
      Array.isArray(r.roles) &&
      r.roles.every((x) => typeof x === 'string') &&
      (r.createdAt === null || typeof r.createdAt === 'number') &&
      (r.expiresAt === null || typeof r.expiresAt === 'number') &&
      typeof r.hash === 'string';
    return ok ? (r as ApiKeyRecord) : null;
  } catch {
    return null;
  }
}

export function byCreation(a: ListedKey, b: ListedKey): number {
  return (a.createdAt ?? 0) - (b.createdAt ?? 0) || (a.id < b.id ? -1 : 1);
}

/** KEYS: the tenant's id set, the key's record; ARGV: id, record, the most keys a tenant may hold. 1 when added. */
const ADD_KEY = `
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[1], ARGV[1])
return 1`;

class MemoryKeyStore implements ApiKeyStore {
  readonly backing = 'memory' as const;
  readonly #records = new Map<string, ApiKeyRecord>();
  readonly #used = new Map<string, number>();
  readonly #listeners: Array<(id: string | null) => void> = [];

  async add(record: ApiKeyRecord, max: number): Promise<boolean> {
    let held = 0;
    for (const r of this.#records.values()) if (r.tenant === record.tenant) held++;
    if (held >= max) return false;
    this.#records.set(record.id, record);
    return true;
  }

  async get(id: string): Promise<ApiKeyRecord | null> {
    return this.#records.get(id) ?? null;
  }

  async list(tenant: string): Promise<ListedKey[]> {
    const out: ListedKey[] = [];
    for (const r of this.#records.values()) if (r.tenant === tenant) out.push({ ...r, lastUsedAt: this.#used.get(r.id) ?? null });
    return out.sort(byCreation);
  }

  async revoke(tenant: string, id: string): Promise<boolean> {
    if (this.#records.get(id)?.tenant !== tenant) return false;
    this.#records.delete(id);
    this.#used.delete(id);
    for (const l of this.#listeners) l(id);
    return true;
  }

  async revokeAll(tenant: string, upTo = Number.POSITIVE_INFINITY): Promise<string[]> {
    const ids = [...this.#records.values()].filter((r) => r.tenant === tenant && createdBy(r, upTo)).map((r) => r.id);
    for (const id of ids) await this.revoke(tenant, id);
    return ids;
  }

  async touch(id: string, at: number): Promise<void> {
    if (this.#records.has(id)) this.#used.set(id, at);
  }

  onRevoked(listener: (id: string | null) => void): void {
    this.#listeners.push(listener);
  }

  /** One process: it hears every revocation as it is made. */
  get checkedAt(): number {
    return Date.now();
  }

  async close(): Promise<void> {}
}

class RedisKeyStore implements ApiKeyStore {
  readonly backing = 'redis' as const;
  readonly #redis: RedisClient;
  readonly #keys: ApiKeyKeys;
  readonly #sub: Subscriber;
  readonly #listeners: Array<(id: string | null) => void> = [];
  readonly #log: Logger;
  /** The revocation count this instance has heard of up to; -1 before the first check. */
  #seen = -1;
  #checkedAt = Date.now();
  readonly #timer: NodeJS.Timeout;

  constructor(redis: RedisClient, prefix: string, seeds: readonly string[], log: Logger, checkMs: number) {
    this.#redis = redis;
    this.#log = log;
    this.#keys = apiKeyKeys(prefix);
    let subscribedBefore = false;
    this.#sub = subscriberFor(redis, seeds, [this.#keys.revoked], {
      subscribed: () => {
        // Revocations published while this connection was away were missed: cached keys are dropped.
        if (subscribedBefore) this.#tell(null);
        subscribedBefore = true;
      },
      failed: (err) => log.warn({ err }, 'API keys: subscribe failed; the revocation check still runs'),
    });
    this.#sub.connection.on('message', (channel: string, message: string) => {
      if (channel === this.#keys.revoked) this.#heard(message);
    });
    void this.#check();
    this.#timer = setInterval(() => void this.#check(), checkMs);
    this.#timer.unref();
  }

  #tell(id: string | null): void {
    for (const l of this.#listeners) l(id);
  }

  /** A revocation message (the key id): one more of the count heard. */
  #heard(id: string): void {
    if (this.#seen >= 0) this.#seen++;
    this.#tell(id);
  }

  /**
   * The safety net for lost messages: the count differs from what was heard, so cached keys are
   * dropped. A check that reads a count before its message arrives drops them needlessly, once or
   * twice: harmless, and rare (the message follows the count within milliseconds).
   */
  async #check(): Promise<void> {
    try {
      const count = Number((await this.#redis.get(this.#keys.revocations)) ?? 0);
      this.#checkedAt = Date.now();
      if (count === this.#seen) return;
      if (this.#seen >= 0) this.#tell(null);
      this.#seen = count;
    } catch {
      // Redis is away: cached keys expire on their own; checkedAt's age says how long this has lasted.
    }
  }

  get checkedAt(): number {
    return this.#checkedAt;
  }

  async add(record: ApiKeyRecord, max: number): Promise<boolean> {
    // The count and the write in one script, so concurrent creates cannot pass the bound together.
    const added = await this.#redis.eval(ADD_KEY, 2, this.#keys.tenant(record.tenant), this.#keys.key(record.id), record.id, JSON.stringify(record), max);
    return added === 1;
  }

  async get(id: string): Promise<ApiKeyRecord | null> {
    return parseRecord(await this.#redis.get(this.#keys.key(id)));
  }

  async list(tenant: string): Promise<ListedKey[]> {
    const ids = await this.#redis.smembers(this.#keys.tenant(tenant));
    if (ids.length === 0) return [];
    const [texts, used] = await Promise.all([this.#redis.mget(ids.map((id) => this.#keys.key(id))), this.#redis.hmget(this.#keys.used, ...ids)]);
    const out: ListedKey[] = [];
    for (const [i, text] of texts.entries()) {
      const r = parseRecord(text);
      if (r === null || r.tenant !== tenant) continue;
      const at = used[i];
      out.push({ ...r, lastUsedAt: at ? Number(at) : null });
    }
    return out.sort(byCreation);
  }

  async revoke(tenant: string, id: string): Promise<boolean> {
    const r = await this.get(id);
    if (r?.tenant !== tenant) return false;
    await this.#revokeIds(tenant, [id]);
    return true;
  }

  async revokeAll(tenant: string, upTo = Number.POSITIVE_INFINITY): Promise<string[]> {
    let ids = await this.#redis.smembers(this.#keys.tenant(tenant));
    if (ids.length === 0) return [];
    if (upTo !== Number.POSITIVE_INFINITY) {
      const texts = await this.#redis.mget(ids.map((id) => this.#keys.key(id)));
      ids = ids.filter((_, i) => createdBy(parseRecord(texts[i] ?? null), upTo));
      if (ids.length === 0) return [];
    }
    await this.#revokeIds(tenant, ids);
    return ids;
  }

  /** Removes keys of a tenant and counts them in one MULTI, then tells every instance. */
  async #revokeIds(tenant: string, ids: readonly string[]): Promise<void> {
    const m = this.#redis.multi();
    for (const id of ids) m.del(this.#keys.key(id));
    const replies = await m
      .srem(this.#keys.tenant(tenant), ...ids)
      .hdel(this.#keys.used, ...ids)
      .incrby(this.#keys.revocations, ids.length)
      .exec();
    const failed = replies?.find(([err]) => err)?.[0];
    if (!replies || failed) throw failed ?? new Error('API keys: revocation not applied');
    for (const id of ids) await this.#announce(id);
  }

  /** This instance forgets a revoked key at once; the others hear it published. A failed publish leaves them the revocation check. */
  async #announce(id: string): Promise<void> {
    this.#tell(id);
    await this.#redis
      .publish(this.#keys.revoked, id)
      .catch((err: unknown) =>
        this.#log.warn({ err, key: id }, 'API key revoked, but not announced: other instances drop it at their next revocation check (5 s)'),
      );
  }

  async touch(id: string, at: number): Promise<void> {
    await this.#redis.hset(this.#keys.used, id, String(at));
  }

  onRevoked(listener: (id: string | null) => void): void {
    this.#listeners.push(listener);
  }

  async close(): Promise<void> {
    clearInterval(this.#timer);
    this.#sub.close();
  }
}

/** The Redis-backed store when a client is given, else one in this process. */
export function createApiKeyStore(
  redis: RedisClient | null,
  settings: { keyPrefix: string; cluster: readonly string[] },
  log: Logger,
  checkMs = REVOCATION_CHECK_MS,
): ApiKeyStore {
  return redis === null ? new MemoryKeyStore() : new RedisKeyStore(redis, settings.keyPrefix, settings.cluster, log, checkMs);
}

/** The configuration file's `apiKeys:` as records (their secrets were never in the file, only their SHA-256). */
export function fileKeyRecords(entries: RawConfig['apiKeys']): ApiKeyRecord[] {
  return entries.map((k) => ({
    id: k.id,
    tenant: k.tenant,
    name: k.name,
    roles: k.roles,
    createdAt: null,
    expiresAt: k.expiresAt === null ? null : Date.parse(k.expiresAt),
    hash: k.sha256,
  }));
}
