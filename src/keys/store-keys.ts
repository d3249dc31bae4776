/**
 * Tenant API keys in the durable store (`store.url`, docs/api-keys.md "Where keys live"): the
 * records (hashes only) are rows of `api_keys`, each create and revoke a transaction that appends
 * its change (`key:<id>`) to the change log. Every instance holds every record in memory, read
 * whole at start and kept current from the change log's feed, so the request path reads memory
 * only: a Redis that comes back empty loses no key, and with the store down existing keys keep
 * verifying while key writes answer `503 store_unavailable`.
 *
 * With Redis, a write is also published on `<prefix>keys-revoked` (the key id, as instances that
 * keep keys in Redis read it), which pokes every instance's feed: a revocation reaches them
 * within a pub/sub delivery; without the message, within the feed's period (5 s).
 */
import { Cluster, type Redis } from 'ioredis';
import pg from 'pg';
import { subscriberFor, type RedisClient, type Subscriber } from '../redis/connection.js';
import { apiKeyKeys, type ApiKeyKeys } from '../redis/keys.js';
import type { Store, Transaction } from '../store/connection.js';
import { appendChange, type Change, type ChangeFeed } from '../store/changes.js';
import type { Logger } from '../observability/log.js';
import { Interner, listKey } from '../cache/intern.js';
import { byCreation, parseRecord, type ApiKeyRecord, type ApiKeyStore, type ListedKey } from './store.js';

/** A key write could not reach the store: the admin API answers `503 store_unavailable`. */
export class StoreUnavailable extends Error {}

/** The change log's subject of a key. */
const SUBJECT = 'key:';
/** Rows per read of a whole load. */
const LOAD_BATCH = 10_000;
/** Records per read and transaction of a copy. */
const COPY_BATCH = 500;
/** Delay before a failed reload of the records is tried again. */
const RETRY_MS = 1000;

interface Row {
  id: string;
  tenant: string;
  name: string;
  roles: string[];
  created_at: string;
  expires_at: string | null;
  hash: string;
}

const COLUMNS = 'id, tenant, name, roles, created_at, expires_at, hash';

/** Role sets are few: every record holding one shares one array. */
const ROLE_SETS = new Interner<readonly string[]>();
const sharedRoles = (roles: readonly string[]): readonly string[] => ROLE_SETS.get(listKey(roles), () => Object.freeze([...roles]));

function recordOf(r: Row): ApiKeyRecord {
  return {
    id: r.id,
    tenant: r.tenant,
    name: r.name,
    roles: sharedRoles(r.roles),
    createdAt: Number(r.created_at),
    expiresAt: r.expires_at === null ? null : Number(r.expires_at),
    hash: r.hash,
  };
}

/** Inserts a record and appends its change, in the caller's transaction; false when the id is taken. */
async function insertKey(tx: Transaction, schema: string, r: ApiKeyRecord, action: string, actor: string): Promise<boolean> {
  const rows = await tx.query(`INSERT INTO api_keys (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING RETURNING id`, [
    r.id,
    r.tenant,
    r.name,
    r.roles,
    r.createdAt ?? 0,
    r.expiresAt,
    r.hash,
  ]);
  if (rows.length === 0) return false;
  await appendChange(tx, schema, { actor, subject: `${SUBJECT}${r.id}`, action, detail: { tenant: r.tenant } });
  return true;
}

/** A statement the server refused is a bug or a conflict; anything else means the store is away. */
function unavailable(err: unknown): never {
  if (err instanceof pg.DatabaseError) throw err;
  throw new StoreUnavailable(`store unavailable: ${(err as Error)?.message ?? String(err)}`);
}

class StoreKeyStore implements ApiKeyStore {
  readonly backing = 'store' as const;
  readonly #store: Store;
  readonly #feed: ChangeFeed;
  readonly #log: Logger;
  readonly #redis: RedisClient | null;
  readonly #keys: ApiKeyKeys;
  readonly #sub: Subscriber | null = null;
  /** Every key record of the store, by id: what the request path reads. */
  #records = new Map<string, ApiKeyRecord>();
  /** Last uses, without Redis (with it, the `used` hash every instance shares). */
  readonly #used = new Map<string, number>();
  readonly #listeners: Array<(id: string | null) => void> = [];
  #retry: NodeJS.Timeout | null = null;
  /** Reads of rows out now, and the ids revoked meanwhile: those reads' rows may predate the revocation. */
  #reading = 0;
  readonly #revokedWhileReading = new Set<string>();

  constructor(store: Store, feed: ChangeFeed, redis: RedisClient | null, settings: { keyPrefix: string; cluster: readonly string[] }, log: Logger) {
    this.#store = store;
    this.#feed = feed;
    this.#redis = redis;
    this.#log = log;
    this.#keys = apiKeyKeys(settings.keyPrefix);
    feed.subscribe(SUBJECT, (changes) => this.#follow(changes));
    if (redis !== null) {
      const sub = subscriberFor(redis, settings.cluster, [this.#keys.revoked], {
        subscribed: () => {},
        failed: (err) => log.warn({ err }, 'API keys: subscribe failed; the change log is read every 5 s'),
      });
      this.#sub = sub;
      sub.connection.on('message', (channel: string) => {
        if (channel === this.#keys.revoked) void feed.poke();
      });
    }
  }

  /** Reads every record (start, or after a change could not be applied). */
  async load(): Promise<void> {
    // Keys learnt while the pages are read (the feed, this instance's own creates) land in the map
    // in force; the new map keeps them, or the read's older pages would drop a valid key.
    const known = new Set(this.#records.keys());
    const next = await this.#read(async () => {
      const found = new Map<string, ApiKeyRecord>();
      let after = '';
      for (;;) {
        const rows = await this.#store.query<Row>(`SELECT ${COLUMNS} FROM api_keys WHERE id > $1 ORDER BY id LIMIT ${LOAD_BATCH}`, [after]);
        for (const r of rows) found.set(r.id, recordOf(r));
        if (rows.length < LOAD_BATCH) return found;
        after = rows[rows.length - 1]!.id;
      }
    });
    const before = this.#records;
    for (const [id, r] of before) if (!known.has(id) && !next.has(id)) next.set(id, r);
    this.#records = next;
    for (const id of before.keys()) if (!next.has(id)) this.#tell(id);
  }

  /** Changes of keys from the log: a revoke is applied as it reads; a create is read from its row. */
  async #follow(changes: readonly Change[]): Promise<void> {
    const created = new Set<string>();
    for (const c of changes) {
      const id = c.subject.slice(SUBJECT.length);
      if (c.action === 'revoke') {
        created.delete(id);
        this.#forget(id);
      } else created.add(id);
    }
    if (created.size === 0) return;
    try {
      const found = await this.#read(async () => {
        const rows = await this.#store.query<Row>(`SELECT ${COLUMNS} FROM api_keys WHERE id = ANY($1::text[])`, [[...created]]);
        return new Map(rows.map((r) => [r.id, recordOf(r)]));
      });
      for (const [id, r] of found) {
        this.#records.set(id, r);
        // An instance that looked the id up before it was here cached it as unknown: not any more.
        this.#tell(id);
      }
    } catch (err) {
      this.#log.warn({ err }, 'API keys: new keys not read from the store; reading them all again shortly');
      this.#reloadSoon();
    }
  }

  #reloadSoon(): void {
    if (this.#retry) return;
    this.#retry = setTimeout(() => {
      this.#retry = null;
      this.load().catch(() => this.#reloadSoon());
    }, RETRY_MS);
    this.#retry.unref();
  }

  /** Records read from the store, less those revoked here while the read was out. */
  async #read(work: () => Promise<Map<string, ApiKeyRecord>>): Promise<Map<string, ApiKeyRecord>> {
    this.#reading++;
    try {
      const found = await work();
      for (const id of this.#revokedWhileReading) found.delete(id);
      return found;
    } finally {
      if (--this.#reading === 0) this.#revokedWhileReading.clear();
    }
  }

  #forget(id: string): void {
    if (this.#reading > 0) this.#revokedWhileReading.add(id);
    if (!this.#records.delete(id)) return;
    this.#used.delete(id);
    this.#tell(id);
  }

  #tell(id: string | null): void {
    for (const l of this.#listeners) l(id);
  }

  /** Peers hear of a write at once (their feed reads the log); without Redis, at the feed's next read. */
  async #announce(id: string): Promise<void> {
    await this.#redis
      ?.publish(this.#keys.revoked, id)
      .catch((err: unknown) =>
        this.#log.warn({ err, key: id }, 'API key change not announced: other instances see it at their next read of the change log (5 s)'),
      );
  }

  async #write<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
    try {
      return await this.#store.transaction(work);
    } catch (err) {
      return unavailable(err);
    }
  }

  async add(record: ApiKeyRecord, max: number, actor = 'admin'): Promise<boolean> {
    const schema = this.#store.schema;
    const added = await this.#write(async (tx) => {
      // A lock per tenant first: its creates are counted one after the other, on every instance.
      await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`queen-edge-keys:${schema}:${record.tenant}`]);
      const rows = await tx.query('SELECT count(*)::int AS n FROM api_keys WHERE tenant = $1', [record.tenant]);
      if (Number(rows[0]!.n) >= max) return false;
      return insertKey(tx, schema, record, 'create', actor);
    });
    if (!added) return false;
    this.#records.set(record.id, { ...record, roles: sharedRoles(record.roles) });
    await this.#announce(record.id);
    return true;
  }

  async get(id: string): Promise<ApiKeyRecord | null> {
    return this.#records.get(id) ?? null;
  }

  async list(tenant: string): Promise<ListedKey[]> {
    const mine = [...this.#records.values()].filter((r) => r.tenant === tenant);
    const used = await this.#lastUses(mine.map((r) => r.id));
    return mine.map((r, i) => ({ ...r, lastUsedAt: used[i] ?? null })).sort(byCreation);
  }

  async #lastUses(ids: readonly string[]): Promise<(number | null)[]> {
    if (this.#redis === null || ids.length === 0) return ids.map((id) => this.#used.get(id) ?? null);
    // Last use is hot state: without Redis's answer the list still shows the keys.
    const at = await this.#redis.hmget(this.#keys.used, ...ids).catch(() => ids.map(() => null));
    return at.map((t) => (t ? Number(t) : null));
  }

  async revoke(tenant: string, id: string, actor = 'admin'): Promise<boolean> {
    return (await this.#revoke(tenant, 'AND id = $2', [id], actor)).length > 0;
  }

  async revokeAll(tenant: string, upTo = Number.POSITIVE_INFINITY, actor = 'admin'): Promise<string[]> {
    return this.#revoke(tenant, 'AND created_at <= $2', [Number.isFinite(upTo) ? upTo : Number.MAX_SAFE_INTEGER], actor);
  }

  /** Deletes a tenant's keys matching `where` and appends a change for each, in one transaction; their ids. */
  async #revoke(tenant: string, where: string, params: readonly unknown[], actor: string): Promise<string[]> {
    const schema = this.#store.schema;
    const ids = await this.#write(async (tx) => {
      const rows = await tx.query(`DELETE FROM api_keys WHERE tenant = $1 ${where} RETURNING id`, [tenant, ...params]);
      for (const r of rows) await appendChange(tx, schema, { actor, subject: `${SUBJECT}${r.id}`, action: 'revoke', detail: { tenant } });
      return rows.map((r) => String(r.id));
    });
    for (const id of ids) {
      this.#forget(id);
      await this.#announce(id);
    }
    if (this.#redis !== null && ids.length > 0) await this.#redis.hdel(this.#keys.used, ...ids).catch(() => {});
    return ids;
  }

  async touch(id: string, at: number): Promise<void> {
    if (this.#redis === null) {
      if (this.#records.has(id)) this.#used.set(id, at);
      return;
    }
    await this.#redis.hset(this.#keys.used, id, String(at));
  }

  onRevoked(listener: (id: string | null) => void): void {
    this.#listeners.push(listener);
  }

  /** The feed reads every change of the log: what it read last is what this instance knows. */
  get checkedAt(): number {
    return this.#feed.readAt;
  }

  async close(): Promise<void> {
    if (this.#retry) clearTimeout(this.#retry);
    this.#sub?.close();
  }
}

/** The store-backed key records, read whole before the edge serves. */
export async function openStoreKeys(
  store: Store,
  feed: ChangeFeed,
  redis: RedisClient | null,
  settings: { keyPrefix: string; cluster: readonly string[] },
  log: Logger,
): Promise<ApiKeyStore> {
  const keys = new StoreKeyStore(store, feed, redis, settings, log);
  await keys.load();
  return keys;
}

/**
 * Copies the key records kept in Redis (before the store) into the store, for the `migrate`
 * command: hashes as they are, each insert with its change; a key already in the store is left as
 * it is. Records that do not parse are skipped. Safe to run again. `store` is open and migrated
 * (openStore); peers following its change log learn of each copied key.
 */
export async function copyKeysToStore(redis: RedisClient, keyPrefix: string, store: Store): Promise<{ readonly copied: number; readonly present: number }> {
  const k = apiKeyKeys(keyPrefix);
  // Every key record shares the {keys} hash tag: on Redis Cluster one master holds them all.
  const sources: Redis[] = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const scanned = new Set<string>();
  for (const source of sources) {
    let cursor = '0';
    do {
      const [next, found] = await source.scan(cursor, 'MATCH', k.key('*'), 'COUNT', 1000);
      cursor = next;
      for (const key of found) scanned.add(key);
    } while (cursor !== '0');
  }
  let copied = 0;
  let present = 0;
  const keys = [...scanned];
  for (let i = 0; i < keys.length; i += COPY_BATCH) {
    const texts = await redis.mget(keys.slice(i, i + COPY_BATCH));
    const records = texts.map((t) => parseRecord(t)).filter((r): r is ApiKeyRecord => r !== null);
    await store.transaction(async (tx) => {
      for (const r of records) {
        if (await insertKey(tx, store.schema, r, 'migrate', 'migrate')) copied++;
        else present++;
      }
    });
  }
  return { copied, present };
}
