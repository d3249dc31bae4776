/**
 * The Redis key layout of queen-edge, in one place. Every key starts with `redis.keyPrefix`.
 *
 * Per tenant (one hash tag, so one EVALSHA can touch all of them on Redis Cluster, and a
 * Cluster spreads tenants, not kinds of key, over its masters):
 *   <p>{t:<id>}:rq            request bucket TAT (ms, string), PX until the bucket is full
 *   <p>{t:<id>}:rm            message bucket TAT, likewise
 *   <p>{t:<id>}:pp            parked-poll slots: ZSET slot id → expiry ms
 *   <p>{t:<id>}:qm:<yyyymm>   messages admitted this UTC month, plus leased slices not yet spent or
 *                             given back; expires a day after the month ends (monthKeyTtlMs)
 *   <p>{t:<id>}:qb:<yyyymm>   ingress bytes this UTC month, likewise
 *   <p>{t:<id>}:qh:<yyyymm>   leased month holdings: HASH instance id → its record (seq, Redis time,
 *                             units spent, held, reclaimed, reclaim and forget times, margin), and
 *                             `~up` → last call, up since (lease-script.ts); expires like qm
 *   <p>{t:<id>}:ud:<yyyymmdd>   usage: HASH `<hh>:<field>` → count (fields in metering/counts.ts)
 *   <p>{t:<id>}:us:<instance>   usage: last flush sequence number of an instance applied here
 *   <p>instances              live proxy instances: ZSET instance id → last heartbeat ms
 *   <p>epoch                  a random id the first edge writes (NX) and every edge reads each
 *                             second: gone or changed means Redis came back empty (epoch.ts)
 *
 * Directory (one hash tag, so a refresh pipelines in one slot on Redis Cluster):
 *   <p>{dir}:tenant:<id>      tenant record, JSON validated by tenantSchema
 *   <p>{dir}:tenants          SET of ids that have a tenant record
 *   <p>{dir}:deleted          SET of ids deleted through the admin API (hides a file tenant)
 *   <p>{dir}:plan:<id>        plan record, JSON validated by planSchema
 *   <p>{dir}:plans            SET of ids that have a plan record
 *   <p>{dir}:status           HASH id → active | suspended (overrides any record's status)
 *   <p>{dir}:storage          HASH id → storage bytes used, from the control plane
 *   <p>{dir}:auth-since       HASH id → ms when the record's own `auth` was written as it is (who keeps a shared key: src/auth/key-claims.ts)
 *   <p>changes                pub/sub channel; a message means "reload the directory"
 *
 * Tenant API keys (one hash tag: a create or a revoke is one MULTI on Redis Cluster too):
 *   <p>{keys}:key:<id>        the key's record (JSON: tenant, name, roles, times, SHA-256), never the key
 *   <p>{keys}:tenant:<id>     SET of the key ids of a tenant
 *   <p>{keys}:used            HASH key id → last use (ms), written at most once a minute per key and instance
 *   <p>{keys}:revocations     counter of revocations, counted in each revoke's MULTI: what the revocation check reads
 *   <p>keys-revoked           pub/sub channel; a message names a revoked key id (one of the revocations counted)
 */

/** Keys of one tenant's limiter state for the month `monthId` (yyyymm). */
export interface LimiterKeys {
  readonly requests: string;
  readonly messages: string;
  readonly parked: string;
  readonly monthMessages: string;
  readonly monthBytes: string;
  /** Leased mode: what each instance holds of this month's quotas (lease-script.ts). */
  readonly monthHoldings: string;
}

/** The limiter keys of a tenant for a month. */
export function limiterKeys(prefix: string, tenantId: string, monthId: string): LimiterKeys {
  const base = `${prefix}{t:${tenantId}}:`;
  return {
    requests: requestBucketKey(prefix, tenantId),
    messages: `${base}rm`,
    parked: parkedKey(prefix, tenantId),
    monthMessages: `${base}qm:${monthId}`,
    monthBytes: `${base}qb:${monthId}`,
    monthHoldings: `${base}qh:${monthId}`,
  };
}

/**
 * PX for a month counter: until a day past the month end, so a skewed instance still finds the
 * key. Whole ms: PEXPIRE refuses a fraction, and a script would fail after its first writes.
 */
export function monthKeyTtlMs(monthEndMs: number, now: number): number {
  return Math.ceil(monthEndMs - now) + 86_400_000;
}

/** A tenant's request bucket (month-independent; exact admits and leased slices share it). */
export function requestBucketKey(prefix: string, tenantId: string): string {
  return `${prefix}{t:${tenantId}}:rq`;
}

/** A tenant's parked-poll slot ZSET (month-independent). */
export function parkedKey(prefix: string, tenantId: string): string {
  return `${prefix}{t:${tenantId}}:pp`;
}

/** The ZSET of live instances. */
export function instancesKey(prefix: string): string {
  return `${prefix}instances`;
}

/** The epoch key: written once, never expires, so its absence says Redis lost its data. */
export function epochKey(prefix: string): string {
  return `${prefix}epoch`;
}

/** Keys of the tenant/plan directory. */
export interface DirectoryKeys {
  tenant(id: string): string;
  readonly tenants: string;
  readonly deleted: string;
  plan(id: string): string;
  readonly plans: string;
  readonly status: string;
  readonly storage: string;
  readonly authSince: string;
  /** Counts directory writes; each change message names the count its write reached, so a peer sees a missed one. */
  readonly version: string;
  readonly changes: string;
}

/** The directory keys under a prefix. */
export function directoryKeys(prefix: string): DirectoryKeys {
  const base = `${prefix}{dir}:`;
  return {
    tenant: (id) => `${base}tenant:${id}`,
    tenants: `${base}tenants`,
    deleted: `${base}deleted`,
    plan: (id) => `${base}plan:${id}`,
    plans: `${base}plans`,
    status: `${base}status`,
    storage: `${base}storage`,
    authSince: `${base}auth-since`,
    version: `${base}version`,
    changes: `${prefix}changes`,
  };
}

/** A tenant's usage hash for one UTC day (`yyyymmdd`). */
export function usageDayKey(prefix: string, tenantId: string, day: string): string {
  return `${prefix}{t:${tenantId}}:ud:${day}`;
}

/** A SCAN pattern matching every tenant's usage day hashes under a prefix (glob characters in it escaped). */
export function usageDayPattern(prefix: string): string {
  return `${prefix.replace(/[*?[\]\\]/g, '\\$&')}{t:*}:ud:*`;
}

/** The tenant and day (`yyyymmdd`) of a usage day key, or null for any other key. */
export function parseUsageDayKey(prefix: string, key: string): { tenantId: string; day: string } | null {
  if (!key.startsWith(`${prefix}{t:`)) return null;
  const m = /^(.+)\}:ud:(\d{8})$/.exec(key.slice(prefix.length + 3));
  return m ? { tenantId: m[1]!, day: m[2]! } : null;
}

/** The last flush sequence number of an instance applied to a tenant's usage. */
export function usageSeqKey(prefix: string, tenantId: string, instanceId: string): string {
  return `${prefix}{t:${tenantId}}:us:${instanceId}`;
}

/** Where tenant API keys live (src/keys/store.ts). */
export interface ApiKeyKeys {
  key(id: string): string;
  tenant(tenantId: string): string;
  readonly used: string;
  readonly revocations: string;
  readonly revoked: string;
}

export function apiKeyKeys(prefix: string): ApiKeyKeys {
  return {
    key: (id) => `${prefix}{keys}:key:${id}`,
    tenant: (tenantId) => `${prefix}{keys}:tenant:${tenantId}`,
    used: `${prefix}{keys}:used`,
    revocations: `${prefix}{keys}:revocations`,
    revoked: `${prefix}keys-revoked`,
  };
}
