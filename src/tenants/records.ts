/**
 * The admin API's records over the configuration file, as writes that every backing applies alike:
 * Redis (a MULTI on the directory keys of src/redis/keys.ts), the durable store (one transaction
 * with its change-log entry, tables of src/store/migrations.ts step 2), or this process's memory.
 * A write says what it changes of one tenant or plan; the directory edits its records with the same
 * description (docs/store.md, "What lives where").
 */
import type { RedisClient } from '../redis/connection.js';
import type { DirectoryKeys } from '../redis/keys.js';
import type { Store, Transaction } from '../store/connection.js';
import { appendChange, lockChanges } from '../store/changes.js';
import type { RedisRecords } from './snapshot.js';

/** What one write changes of a tenant: an absent field stays, null clears it. */
export interface TenantPatch {
  /** The record JSON (tenantSchema). */
  readonly record?: string | null;
  /** The tombstone hiding the file's entry. */
  readonly deleted?: boolean;
  /** `active` or `suspended`, over the record's own status. */
  readonly status?: string | null;
  /** Storage bytes used, from the control plane. */
  readonly storage?: string | null;
  /** When the record's own `auth` was written as it is (ms). */
  readonly authSince?: string | null;
}

/** One admin write, with the change-log action it is recorded as. */
export type RecordWrite =
  | { readonly kind: 'tenant'; readonly id: string; readonly action: string; readonly patch: TenantPatch }
  | { readonly kind: 'plan'; readonly id: string; readonly action: string; readonly record: string };

/** `tenant:<id>` or `plan:<id>`: the change log's subject and the change message's. */
export function subjectOf(w: RecordWrite): string {
  return `${w.kind}:${w.id}`;
}

function setOrDelete(hash: Record<string, string>, id: string, value: string | null | undefined): void {
  if (value === undefined) return;
  if (value === null) delete hash[id];
  else hash[id] = value;
}

/** The records after a write: what the writer (and a peer reading it) places in the directory. */
export function applyWrite(r: RedisRecords, w: RecordWrite): void {
  if (w.kind === 'plan') {
    r.plans.set(w.id, w.record);
    return;
  }
  const { id, patch: p } = w;
  if (p.record === null) r.tenants.delete(id);
  else if (p.record !== undefined) r.tenants.set(id, p.record);
  if (p.deleted === true) r.deleted.add(id);
  else if (p.deleted === false) r.deleted.delete(id);
  setOrDelete(r.status, id, p.status);
  setOrDelete(r.storage, id, p.storage);
  if (r.authSince) setOrDelete(r.authSince, id, p.authSince);
}

/** The write as a Redis transaction on the directory keys (the caller adds the version count). */
export function redisWrite(redis: RedisClient, k: DirectoryKeys, w: RecordWrite): ReturnType<RedisClient['multi']> {
  const m = redis.multi();
  if (w.kind === 'plan') return m.set(k.plan(w.id), w.record).sadd(k.plans, w.id);
  const { id, patch: p } = w;
  if (p.record === null) m.del(k.tenant(id)).srem(k.tenants, id);
  else if (p.record !== undefined) m.set(k.tenant(id), p.record).sadd(k.tenants, id);
  if (p.deleted === true) m.sadd(k.deleted, id);
  else if (p.deleted === false) m.srem(k.deleted, id);
  const hash = (key: string, value: string | null | undefined): void => {
    if (value === null) m.hdel(key, id);
    else if (value !== undefined) m.hset(key, id, value);
  };
  hash(k.status, p.status);
  hash(k.storage, p.storage);
  hash(k.authSince, p.authSince);
  return m;
}

/** Keys per MGET of a full load. */
const MGET_BATCH = 1000;

/** Every record in Redis, and the directory version they were read at. */
export async function loadFromRedis(redis: RedisClient, k: DirectoryKeys): Promise<{ readonly version: number; readonly records: RedisRecords }> {
  const first = await redis
    .pipeline()
    .get(k.version)
    .smembers(k.tenants)
    .smembers(k.plans)
    .smembers(k.deleted)
    .hgetall(k.status)
    .hgetall(k.storage)
    .hgetall(k.authSince)
    .exec();
  const [version, tenantIds, planIds, deleted, status, storage, authSince] = (first ?? []).map(([err, value]) => {
    if (err) throw err;
    return value;
  }) as [string | null, string[], string[], string[], Record<string, string>, Record<string, string>, Record<string, string>];
  // Every directory key shares the {dir} hash tag, so MGET serves Redis Cluster too; in batches,
  // so no one reply holds Redis or this event loop long.
  const keys = [...tenantIds.map((id) => k.tenant(id)), ...planIds.map((id) => k.plan(id))];
  const values: (string | null)[] = [];
  for (let i = 0; i < keys.length; i += MGET_BATCH) values.push(...(await redis.mget(keys.slice(i, i + MGET_BATCH))));
  const zip = (ids: string[], offset: number): Map<string, string> => {
    const m = new Map<string, string>();
    ids.forEach((id, i) => {
      const v = values[offset + i];
      if (typeof v === 'string') m.set(id, v);
    });
    return m;
  };
  return {
    version: Number(version ?? 0),
    records: { tenants: zip(tenantIds, 0), plans: zip(planIds, tenantIds.length), deleted: new Set(deleted), status, storage, authSince },
  };
}

/** What a copy into the store found for each record: written, already there alike, or there and different (the store's kept). */
export interface CopyReport {
  readonly copied: number;
  readonly same: number;
  readonly kept: number;
}

/**
 * Copies Redis's directory records (tenants, plans, tombstones, overrides, auth ages) into the
 * store, in one transaction, each copied record with its change. Idempotent: a record the store
 * already holds is left as it is (counted `same` or `kept`), so a second run copies nothing.
 */
export async function copyRecordsToStore(redis: RedisClient, k: DirectoryKeys, store: Store, actor = 'migrate'): Promise<CopyReport> {
  const { records: r } = await loadFromRedis(redis, k);
  const ids = new Set([...r.tenants.keys(), ...r.deleted, ...Object.keys(r.status), ...Object.keys(r.storage), ...Object.keys(r.authSince ?? {})]);
  return store.transaction(async (tx) => {
    // The writers' lock before any row, as the admin writes take it: opposite orders would deadlock.
    await lockChanges(tx, store.schema);
    const counts = { copied: 0, same: 0, kept: 0 };
    const copy = async (subject: string, insert: () => Promise<unknown[]>, same: () => Promise<unknown[]>): Promise<void> => {
      if ((await insert()).length > 0) {
        counts.copied++;
        await appendChange(tx, store.schema, { actor, subject, action: 'migrate' });
      } else if ((await same()).length > 0) counts.same++;
      else counts.kept++;
    };
    for (const id of [...ids].sort()) {
      const p = [id, r.tenants.get(id) ?? null, r.deleted.has(id), r.status[id] ?? null, r.storage[id] ?? null, r.authSince?.[id] ?? null];
      await copy(
        `tenant:${id}`,
        () =>
          tx.query(
            `INSERT INTO tenant_records (id, record, deleted, status, storage_bytes, auth_since) VALUES ($1, $2::jsonb, $3, $4, $5, $6)
             ON CONFLICT (id) DO NOTHING RETURNING id`,
            p,
          ),
        () =>
          tx.query(
            `SELECT id FROM tenant_records WHERE id = $1 AND record IS NOT DISTINCT FROM $2::jsonb AND deleted = $3
               AND status IS NOT DISTINCT FROM $4 AND storage_bytes IS NOT DISTINCT FROM $5::bigint AND auth_since IS NOT DISTINCT FROM $6::bigint`,
            p,
          ),
      );
    }
    for (const [id, record] of [...r.plans].sort(([a], [b]) => a.localeCompare(b))) {
      await copy(
        `plan:${id}`,
        () => tx.query('INSERT INTO plan_records (id, record) VALUES ($1, $2::jsonb) ON CONFLICT (id) DO NOTHING RETURNING id', [id, record]),
        () => tx.query('SELECT id FROM plan_records WHERE id = $1 AND record = $2::jsonb', [id, record]),
      );
    }
    return counts;
  });
}

/** A tenant_records row as read (bigints as text, the record as JSON text). */
interface TenantRow {
  readonly id: string;
  readonly record: string | null;
  readonly deleted: boolean;
  readonly status: string | null;
  readonly storage: string | null;
  readonly auth_since: string | null;
}

const TENANT_COLUMNS = 'id, record::text AS record, deleted, status, storage_bytes::text AS storage, auth_since::text AS auth_since';

/** Every field of a row as a patch: what a peer applies when it reads the row again. */
function rowPatch(row: TenantRow | undefined): TenantPatch {
  return {
    record: row?.record ?? null,
    deleted: row?.deleted ?? false,
    status: row?.status ?? null,
    storage: row?.storage ?? null,
    authSince: row?.auth_since ?? null,
  };
}

/**
 * Makes a write in the store, with its change-log entry in the same transaction; returns the
 * change's sequence number (what peers follow).
 */
export async function writeToStore(store: Store, w: RecordWrite, actor: string): Promise<number> {
  return store.transaction(async (tx) => {
    const seq = await appendChange(tx, store.schema, { actor, subject: subjectOf(w), action: w.action });
    if (w.kind === 'plan') {
      await tx.query(
        'INSERT INTO plan_records (id, record) VALUES ($1, $2::jsonb) ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, updated_at = now()',
        [w.id, w.record],
      );
      return seq;
    }
    const rows = (await tx.query(`SELECT ${TENANT_COLUMNS} FROM tenant_records WHERE id = $1 FOR UPDATE`, [w.id])) as TenantRow[];
    await putTenantRow(tx, w.id, { ...rowPatch(rows[0]), ...w.patch });
    return seq;
  });
}

/** Writes a tenant's whole row; a row that overrides nothing is deleted. */
async function putTenantRow(tx: Transaction, id: string, p: TenantPatch): Promise<void> {
  if (p.record == null && !p.deleted && p.status == null && p.storage == null && p.authSince == null) {
    await tx.query('DELETE FROM tenant_records WHERE id = $1', [id]);
    return;
  }
  await tx.query(
    `INSERT INTO tenant_records (id, record, deleted, status, storage_bytes, auth_since) VALUES ($1, $2::jsonb, $3, $4, $5, $6)
     ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record, deleted = EXCLUDED.deleted, status = EXCLUDED.status,
       storage_bytes = EXCLUDED.storage_bytes, auth_since = EXCLUDED.auth_since, updated_at = now()`,
    [id, p.record ?? null, p.deleted === true, p.status ?? null, p.storage ?? null, p.authSince ?? null],
  );
}

/** Every record in the store, and the change log's position they are consistent with. */
export async function loadFromStore(store: Store): Promise<{ readonly records: RedisRecords; readonly seq: number }> {
  return store.transaction(async (tx) => {
    // One snapshot for the three reads: the records are exactly those of the changes up to `seq`.
    await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const [seqRows, tenantRows, planRows] = [
      await tx.query('SELECT coalesce(max(seq), 0)::text AS seq FROM change_log'),
      (await tx.query(`SELECT ${TENANT_COLUMNS} FROM tenant_records`)) as TenantRow[],
      await tx.query('SELECT id, record::text AS record FROM plan_records'),
    ];
    const records: RedisRecords = { tenants: new Map(), plans: new Map(), deleted: new Set(), status: {}, storage: {}, authSince: {} };
    for (const row of tenantRows) applyWrite(records, { kind: 'tenant', id: row.id, action: 'load', patch: rowPatch(row) });
    for (const row of planRows) records.plans.set(row.id as string, row.record as string);
    return { records, seq: Number(seqRows[0]!.seq) };
  });
}

/** The current rows of some tenants and plans, as the writes that bring a peer's records to them. */
export async function readFromStore(store: Store, tenantIds: readonly string[], planIds: readonly string[]): Promise<RecordWrite[]> {
  const writes: RecordWrite[] = [];
  if (tenantIds.length > 0) {
    const rows = await store.query<TenantRow>(`SELECT ${TENANT_COLUMNS} FROM tenant_records WHERE id = ANY($1)`, [tenantIds]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    for (const id of tenantIds) writes.push({ kind: 'tenant', id, action: 'read', patch: rowPatch(byId.get(id)) });
  }
  if (planIds.length > 0) {
    const rows = await store.query<{ id: string; record: string }>('SELECT id, record::text AS record FROM plan_records WHERE id = ANY($1)', [planIds]);
    // Plans are never deleted by the admin API: a missing row is one not written yet.
    for (const r of rows) writes.push({ kind: 'plan', id: r.id, action: 'read', record: r.record });
  }
  return writes;
}
