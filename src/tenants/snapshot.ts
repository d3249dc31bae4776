/**
 * The tenant directory as one pure function of its inputs: the config file's plans and tenants,
 * and the records last read from Redis. Boot, every reload, an admin write ("would this record be
 * accepted?") and a config-file reload all go through buildSnapshot, so a tenant is validated by
 * one set of rules wherever it comes from:
 *
 * - ids match ID_PATTERN (file tenants and plans too: they become Redis keys and URL segments);
 * - a tenant's plan exists (file plans, overridden or extended by plan records);
 * - no two tenant ids differ only in case;
 * - no host is listed by two tenants, and no tenant's own `auth` trusts the same tokens as another
 *   tenant's or the global settings (sameTrust, src/auth/key-trust.ts). The file wins over records; among
 *   records the lower id wins (two instances could each accept one write before seeing the
 *   other's), and the losing record is rejected, falling back to the file's version of that
 *   tenant when it has one.
 *
 * A rejected Redis record never takes effect: the previous version (the file's, or none) stays.
 */
import type { z } from 'zod';
import { recordAuthProblems } from '../auth/key-files.js';
import type { TenantJwksAllowances } from '../auth/jwks-url.js';
import { planSchema, tenantSchema, type RawPlan, type RawTenant } from '../config/schema.js';
import { brokerIdentity } from './brokers.js';
import { sameTrust, type TrustSettings } from './tenancy.js';
import { storageVerdict } from './storage.js';
import { canonicalHost, compilePlan, compileTenant, ID_PATTERN, type Plan, type Tenant } from './model.js';

/** The config file's part of the directory. */
export interface FileDirectory {
  readonly plans: Readonly<Record<string, RawPlan>>;
  readonly tenants: Readonly<Record<string, RawTenant>>;
  /** The global token settings, which no tenant's own `auth` may repeat; `jwks`: where records' JWKS may be. */
  readonly auth?: TrustSettings & { readonly jwks?: TenantJwksAllowances };
}

/** What one reload reads from Redis (record texts are JSON, not yet validated). */
export interface RedisRecords {
  readonly tenants: ReadonlyMap<string, string>;
  readonly plans: ReadonlyMap<string, string>;
  readonly deleted: ReadonlySet<string>;
  readonly status: Readonly<Record<string, string>>;
  readonly storage: Readonly<Record<string, string>>;
  /** When each record's own `auth` was written as it is (ms); read by the verifiers only (src/auth/key-claims.ts). */
  readonly authSince?: Readonly<Record<string, string>>;
}

export const NO_RECORDS: RedisRecords = Object.freeze({ tenants: new Map(), plans: new Map(), deleted: new Set<string>(), status: {}, storage: {} });

/** One immutable view of the directory. */
export interface Snapshot {
  readonly byId: ReadonlyMap<string, Tenant>;
  readonly byHost: ReadonlyMap<string, Tenant>;
  readonly plans: ReadonlyMap<string, Plan>;
  /** The record in force for each tenant (Redis record or file entry), for the admin view. */
  readonly records: ReadonlyMap<string, RawTenant>;
  readonly storage: ReadonlyMap<string, number>;
  readonly blocked: ReadonlySet<string>;
  /** Compiled objects by their source text, so an unchanged tenant keeps its identity across builds. */
  readonly compiled: ReadonlyMap<string, { readonly sig: string; readonly value: Tenant | Plan }>;
}

/** A record or file entry that did not make it into the snapshot, and why. */
export interface Rejection {
  readonly kind: 'tenant' | 'plan';
  readonly id: string;
  readonly source: 'file' | 'redis';
  /** Another tenant holds one of its hosts (the admin API answers 409 for this one). */
  readonly conflict: boolean;
  readonly problems: readonly string[];
}

export interface Built {
  readonly snapshot: Snapshot;
  readonly rejected: readonly Rejection[];
}

/** Problems of a zod failure, by path. */
export function problemsOf(error: z.ZodError): string[] {
  return error.issues.map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`);
}

function parseRecord<T>(text: string, schema: z.ZodType<T>): T | string[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return [`not JSON: ${(err as Error).message}`];
  }
  const parsed = schema.safeParse(value);
  return parsed.success ? parsed.data : problemsOf(parsed.error);
}

const badId = (id: string): string => `id "${id}": must match ${ID_PATTERN.source}`;

/** What identifies the broker a URL names: its host and port, and the addresses its name resolved to (broker-addresses.ts). */
export type BrokerIdentities = (url: string) => readonly string[];

const spelledOnly: BrokerIdentities = (url) => [brokerIdentity(url)];

/**
 * The directory for `file` and `records`. `previous` (the snapshot in force) lends unchanged
 * compiled objects and the storage gate's hysteresis state; `identitiesOf` says which brokers are
 * one (by default their spelling alone); the result depends on nothing else.
 */
export function buildSnapshot(file: FileDirectory, records: RedisRecords, previous?: Snapshot, identitiesOf: BrokerIdentities = spelledOnly): Built {
  const rejected: Rejection[] = [];
  const reject = (what: string, source: 'file' | 'redis', problems: readonly string[], conflict = false): void => {
    const colon = what.indexOf(':');
    rejected.push({ kind: what.slice(0, colon) as 'tenant' | 'plan', id: what.slice(colon + 1), source, conflict, problems });
  };
  const compiledBefore = previous?.compiled;
  const compiled = new Map<string, { sig: string; value: Tenant | Plan }>();

  const rawPlans = new Map<string, RawPlan>();
  for (const [id, raw] of Object.entries(file.plans)) {
    if (ID_PATTERN.test(id)) rawPlans.set(id, raw);
    else reject(`plan:${id}`, 'file', [badId(id)]);
  }
  for (const [id, text] of records.plans) {
    const p = ID_PATTERN.test(id) ? parseRecord(text, planSchema) : [badId(id)];
    if (Array.isArray(p)) reject(`plan:${id}`, 'redis', p);
    else rawPlans.set(id, p);
  }
  const plans = new Map<string, Plan>();
  const planSigs = new Map<string, string>();
  for (const [id, raw] of rawPlans) {
    const sig = JSON.stringify(raw);
    const key = `plan:${id}`;
    const prev = compiledBefore?.get(key);
    const plan = prev?.sig === sig ? (prev.value as Plan) : compilePlan(id, raw);
    plans.set(id, plan);
    planSigs.set(id, sig);
    compiled.set(key, { sig, value: plan });
  }

  /** A candidate tenant version: its problems without looking at other tenants' hosts. */
  const check = (id: string, raw: RawTenant): string[] => {
    const problems: string[] = [];
    if (!ID_PATTERN.test(id)) problems.push(badId(id));
    if (!plans.has(raw.plan)) problems.push(`plan: unknown plan "${raw.plan}"`);
    return problems;
  };

  // Candidates: the file's version, and a valid record replacing it unless the tenant was deleted.
  const fromFile = new Map<string, RawTenant>();
  for (const [id, raw] of Object.entries(file.tenants)) {
    const problems = check(id, raw);
    if (problems.length > 0)
      reject(
        `tenant:${id}`,
        'file',
        problems.map((p) => `tenants.${id}.${p}`),
      );
    else if (!records.deleted.has(id)) fromFile.set(id, raw);
  }
  const fromRedis = new Map<string, RawTenant>();
  for (const id of [...records.tenants.keys()].sort()) {
    if (records.deleted.has(id)) continue;
    const parsed = parseRecord(records.tenants.get(id)!, tenantSchema);
    // A record's key is inline and its JWKS one the edge may fetch (src/auth/key-files.ts).
    const problems = Array.isArray(parsed) ? parsed : [...check(id, parsed), ...recordAuthProblems(parsed.auth, file.auth?.jwks)];
    if (problems.length > 0) reject(`tenant:${id}`, 'redis', problems);
    else fromRedis.set(id, parsed as RawTenant);
  }

  // Hosts and brokers: file versions first (in file order), then records by id; a later claim loses.
  const owner = new Map<string, string>();
  const inForce = new Map<string, RawTenant>();
  /** Tenants in force by the identities (identitiesOf) of the brokers they list. */
  const brokerUsers = new Map<string, BrokerUsers>();
  /** Tenants in force by their id lower-cased. */
  const byFoldedId = new Map<string, string>();
  const takenBy = (id: string, raw: RawTenant): string | undefined => {
    // Ids reach brokers and Redis keys verbatim, and a broker or a reader that folds case would merge them.
    const twin = byFoldedId.get(id.toLowerCase());
    if (twin !== undefined && twin !== id) return `id: tenant "${id}" differs from tenant "${twin}" only in case (tenant ids are unique regardless of case)`;
    for (const h of raw.hosts) {
      const other = owner.get(canonicalHost(h));
      if (other !== undefined && other !== id) return `hosts: host "${canonicalHost(h)}" is already listed by tenant "${other}"`;
    }
    for (const b of raw.brokers) {
      for (const identity of identitiesOf(b)) {
        const shared = sharedBroker(id, raw, b, identity, brokerUsers.get(identity), inForce);
        if (shared) return shared;
      }
    }
    if (raw.auth) {
      if (file.auth && sameTrust(raw.auth, file.auth))
        return 'auth: trusts the same tokens as the global auth settings (same key, no distinct issuer or audience)';
      for (const [other, t] of inForce) {
        if (other !== id && t.auth && sameTrust(raw.auth, t.auth))
          return `auth: trusts the same tokens as tenant "${other}" (same key, no distinct issuer or audience)`;
      }
    }
    return undefined;
  };
  const admit = (id: string, raw: RawTenant): void => {
    inForce.set(id, raw);
    byFoldedId.set(id.toLowerCase(), id);
    for (const h of raw.hosts) owner.set(canonicalHost(h), id);
    for (const b of new Set(raw.brokers.flatMap(identitiesOf))) {
      let users = brokerUsers.get(b);
      if (users === undefined) {
        users = { all: [], undeclared: [] };
        brokerUsers.set(b, users);
      }
      users.all.push(id);
      if (!raw.tenancyAwareBrokers) users.undeclared.push(id);
    }
  };
  for (const [id, raw] of fromFile) {
    if (fromRedis.has(id)) continue;
    const taken = takenBy(id, raw);
    if (taken) reject(`tenant:${id}`, 'file', [`tenants.${id}.${taken}`], true);
    else admit(id, raw);
  }
  for (const [id, raw] of fromRedis) {
    const taken = takenBy(id, raw);
    if (taken === undefined) {
      admit(id, raw);
      continue;
    }
    reject(`tenant:${id}`, 'redis', [taken], true);
    const fallback = fromFile.get(id);
    if (fallback === undefined) continue;
    const stillTaken = takenBy(id, fallback);
    if (stillTaken) reject(`tenant:${id}`, 'file', [`tenants.${id}.${stillTaken}`], true);
    else admit(id, fallback);
  }

  const byId = new Map<string, Tenant>();
  const byHost = new Map<string, Tenant>();
  for (const [id, base] of inForce) {
    const override = records.status[id];
    const raw: RawTenant = override === 'active' || override === 'suspended' ? { ...base, status: override } : base;
    const sig = `${JSON.stringify(raw)}|${planSigs.get(raw.plan)}`;
    const key = `tenant:${id}`;
    const prev = compiledBefore?.get(key);
    const tenant = prev?.sig === sig ? (prev.value as Tenant) : compileTenant(id, raw, plans.get(raw.plan)!);
    byId.set(id, tenant);
    for (const h of tenant.hosts) byHost.set(h, tenant);
    compiled.set(key, { sig, value: tenant });
  }

  const storage = new Map<string, number>();
  const blocked = new Set<string>();
  for (const [id, tenant] of byId) {
    const text = records.storage[id];
    const used = text === undefined ? undefined : Number(text);
    if (used !== undefined && Number.isFinite(used)) storage.set(id, used);
    if (storageVerdict(storage.get(id), tenant.plan.storageBytes, previous?.blocked.has(id) ?? false)) blocked.add(id);
  }
  return { snapshot: { byId, byHost, plans, records: inForce, storage, blocked, compiled }, rejected };
}

/** The tenants in force on one broker, and those of them that did not declare it tenancy-aware. */
interface BrokerUsers {
  readonly all: string[];
  readonly undeclared: string[];
}

/**
 * Why tenant `id` may not list broker `url` that tenants `users` (in force) already list; undefined
 * when it may. Broker 0.15 has no notion of the edge's tenants: two tenants on one broker read,
 * pop and delete each other's queues, unless every tenant on it declares the broker tenancy-aware
 * (docs/tenancy.md, "Dedicated and shared brokers").
 */
function sharedBroker(
  id: string,
  raw: RawTenant,
  url: string,
  identity: string,
  users: BrokerUsers | undefined,
  inForce: ReadonlyMap<string, RawTenant>,
): string | undefined {
  // Each search ends within a step or two: the rule admits at most one undeclared user per broker.
  const other = (raw.tenancyAwareBrokers ? users?.undeclared : users?.all)?.find((u) => u !== id);
  if (other === undefined) return undefined;
  const undeclared = [id, other].filter((t) => !(t === id ? raw : inForce.get(t)!).tenancyAwareBrokers);
  return (
    `brokers: tenant "${id}" and tenant "${other}" both list broker "${url}" (host and port ${brokerIdentity(url)}${identity === brokerIdentity(url) ? '' : `, address ${identity}`}) and would read ` +
    `each other's queues: give each tenant its own brokers, or, for a broker that scopes data by x-queen-tenant, set ` +
    `tenancyAwareBrokers: true on ${undeclared.map((t) => `tenant "${t}"`).join(' and ')} (docs/tenancy.md)`
  );
}

/** True when `next` differs from `prev` in anything a reader can observe. */
export function snapshotChanged(prev: Snapshot, next: Snapshot): boolean {
  return !sameMap(prev.byId, next.byId) || !sameMap(prev.plans, next.plans) || !sameMap(prev.storage, next.storage) || !sameSet(prev.blocked, next.blocked);
}

function sameMap<V>(a: ReadonlyMap<string, V>, b: ReadonlyMap<string, V>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}

function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false;
  for (const k of a) if (!b.has(k)) return false;
  return true;
}
