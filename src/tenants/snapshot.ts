/**
 * The tenant directory as a function of its inputs: the config file's plans and tenants, and the
 * records last read from Redis. Boot, every reload, an admin write ("would this record be
 * accepted?") and a config-file reload all go through one set of rules, so a tenant is validated
 * the same way wherever it comes from:
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
 *
 * The directory is an index kept up to date in place: a full build places every tenant in
 * precedence order (in slices, so a caller can yield between them), and a change to one tenant
 * places that tenant again, in O(1) amortised (docs/tenancy.md, "Many tenants"). When a change
 * could alter another tenant's fate (it would take a host from a tenant it outranks, or it freed
 * what a refused tenant wanted), `place` answers false and the caller runs a full build.
 */
import type { z } from 'zod';
import { recordAuthProblems } from '../auth/key-files.js';
import type { TenantJwksAllowances } from '../auth/jwks-url.js';
import { planSchema, tenantSchema, type RawPlan, type RawTenant } from '../config/schema.js';
import { brokerIdentity, memoByUrl } from './brokers.js';
import { sameTrust, type TrustSettings } from './tenancy.js';
import { storageVerdict } from './storage.js';
import { canonicalHost, compilePlan, compileTenant, ID_PATTERN, type Plan, type Tenant } from './model.js';
import type { RawTenantAuth } from '../config/schema.js';
import { runSteps, tenantIds } from '../config/tenant-ids.js';

/** The config file's part of the directory. */
export interface FileDirectory {
  readonly plans: Readonly<Record<string, RawPlan>>;
  readonly tenants: Readonly<Record<string, RawTenant>>;
  /** The global token settings, which no tenant's own `auth` may repeat; `jwks`: where records' JWKS may be. */
  readonly auth?: TrustSettings & { readonly jwks?: TenantJwksAllowances };
}

/**
 * What the directory reads from Redis (record texts are JSON, not yet validated). The store
 * updates one tenant's entries in place and then places that tenant again.
 */
export interface RedisRecords {
  readonly tenants: Map<string, string>;
  readonly plans: Map<string, string>;
  readonly deleted: Set<string>;
  readonly status: Record<string, string>;
  readonly storage: Record<string, string>;
  /** When each record's own `auth` was written as it is (ms); read by the verifiers only (src/auth/key-claims.ts). */
  readonly authSince?: Record<string, string>;
}

/** Empty records (a fresh object each time: the store changes its records in place). */
export function noRecords(): RedisRecords {
  return { tenants: new Map(), plans: new Map(), deleted: new Set<string>(), status: {}, storage: {}, authSince: {} };
}

export const NO_RECORDS: RedisRecords = Object.freeze(noRecords());

/** The directory as readers see it. */
export interface Snapshot {
  readonly byId: ReadonlyMap<string, Tenant>;
  readonly byHost: ReadonlyMap<string, Tenant>;
  readonly plans: ReadonlyMap<string, Plan>;
  /** The record in force for each tenant (Redis record or file entry), for the admin view. */
  readonly records: ReadonlyMap<string, RawTenant>;
  readonly storage: ReadonlyMap<string, number>;
  readonly blocked: ReadonlySet<string>;
}

/** A record or file entry that did not make it into the directory, and why. */
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

/** One version of a tenant that may be placed: the record's, or the file's. */
interface Candidate {
  readonly raw: RawTenant;
  readonly source: 'file' | 'redis';
}

/** Why a candidate may not be placed, and the tenant in force it clashes with (none: the global auth settings). */
interface Clash {
  readonly problem: string;
  readonly other: string | undefined;
}

/** The tenants in force on one broker, and those of them that did not declare it tenancy-aware. */
interface BrokerUsers {
  readonly all: Set<string>;
  readonly undeclared: Set<string>;
}

/** brokerIdentity, asked three times per tenant placed. */
const identityOf = memoByUrl(brokerIdentity);

/** What identifies the broker a URL names: its host and port, and the addresses its name resolved to (broker-addresses.ts). */
export type BrokerIdentities = (url: string) => readonly string[];

/** A broker identified by its spelling alone (host and port). */
const spelledOnly: BrokerIdentities = (url) => [identityOf(url)];

/** Calls between which a full build may yield; one placement is a few microseconds. */
const SLICE = 256;

/**
 * The directory index. Readers use the Snapshot fields; `place` and `placePlans` apply changes
 * to the inputs it was built from (its `file` and `records`), which the store edits in place.
 */
export class TenantIndex implements Snapshot {
  readonly byId = new Map<string, Tenant>();
  readonly byHost = new Map<string, Tenant>();
  plans = new Map<string, Plan>();
  readonly records = new Map<string, RawTenant>();
  /** Tenants whose version in force is their Redis record (written through the admin API), not the file's. */
  readonly fromRecord = new Set<string>();
  readonly storage = new Map<string, number>();
  readonly blocked = new Set<string>();
  /** Rejections by `kind:id`, in the order they were found. */
  readonly #rejected = new Map<string, Rejection[]>();
  /** Tenants refused because another holds what they list: a change that frees something may let one in. */
  readonly #conflicted = new Set<string>();
  /** Tenants in force by the identities (identitiesOf) of the brokers they list. */
  readonly #brokerUsers = new Map<string, BrokerUsers>();
  /** The broker identities each tenant in force was placed under (names may resolve anew later). */
  readonly #brokerIds = new Map<string, readonly string[]>();
  /** Tenants in force by their id lower-cased. */
  readonly #byFolded = new Map<string, string>();
  /** Tenants in force with their own `auth` (few): each new one is compared with all of them. */
  readonly #withAuth = new Map<string, RawTenantAuth>();
  /** Broker URLs in force and how many tenants list each: what the broker health checks follow. */
  readonly brokerUrls = new Map<string, number>();
  /** Plan ids with tenants in force and how many: the admin plan list reads it without walking the tenants. */
  readonly planTenants = new Map<string, number>();
  /**
   * Broker URLs that came into force or left it since the store last told its subscribers, each
   * with whether it was in force then: what the broker health checks follow, in O(changed).
   */
  readonly brokerMoves = new Map<string, boolean>();
  /** Position of each file tenant: the file's tenants take hosts in file order. */
  #fileOrder: Map<string, number> | null = null;
  #planSigs = new Map<string, string>();
  /** Parsed records by id, kept for as long as their text is the one in `records` (a record is parsed once). */
  readonly #parsed = new Map<string, { readonly text: string; readonly value: RawTenant | string[] }>();

  constructor(
    /** The file in force; a reload sets a new one, then calls fileChanged() and places the tenants that differ. */
    public file: FileDirectory,
    /** The Redis records in force; a full read sets new ones, then places the tenants that differ. */
    public redis: RedisRecords,
    /** The index in force, which lends its compiled tenants, parsed records and the storage gate's state while this one is built. */
    public previous?: TenantIndex,
    /** Which brokers are one: by default their spelling alone; the store's resolves names to addresses. */
    public identitiesOf: BrokerIdentities = spelledOnly,
  ) {}

  /** After `file` was replaced: the file order is read again when next needed. */
  fileChanged(): void {
    this.#fileOrder = null;
  }

  get rejected(): Rejection[] {
    return [...this.#rejected.values()].flat();
  }

  /** Rejections of one tenant or plan (`kind:id`). */
  rejectionsOf(key: string): readonly Rejection[] {
    return this.#rejected.get(key) ?? [];
  }

  /** Tenants in force with their own token settings. */
  withOwnAuth(): Iterable<Tenant> {
    const out: Tenant[] = [];
    for (const id of this.#withAuth.keys()) out.push(this.byId.get(id)!);
    return out;
  }

  /**
   * Compiles the plans (file plans, overridden or extended by plan records); true when a plan a
   * reader can see changed, which every tenant on it must follow (a full build).
   */
  placePlans(): boolean {
    const raws = new Map<string, RawPlan>();
    for (const key of [...this.#rejected.keys()]) if (key.startsWith('plan:')) this.#rejected.delete(key);
    for (const [id, raw] of Object.entries(this.file.plans)) {
      if (ID_PATTERN.test(id)) raws.set(id, raw);
      else this.#reject({ kind: 'plan', id, source: 'file', conflict: false, problems: [badId(id)] });
    }
    for (const [id, text] of this.redis.plans) {
      const p = ID_PATTERN.test(id) ? parseRecord(text, planSchema) : [badId(id)];
      if (Array.isArray(p)) this.#reject({ kind: 'plan', id, source: 'redis', conflict: false, problems: p });
      else raws.set(id, p);
    }
    const lender = this.plans.size > 0 ? this : this.previous;
    const plans = new Map<string, Plan>();
    const sigs = new Map<string, string>();
    let changed = raws.size !== this.plans.size;
    for (const [id, raw] of raws) {
      const sig = JSON.stringify(raw);
      const prev = lender !== undefined && lender.#planSigs.get(id) === sig ? lender.plans.get(id) : undefined;
      plans.set(id, prev ?? compilePlan(id, raw));
      sigs.set(id, sig);
      if (plans.get(id) !== this.plans.get(id)) changed = true;
    }
    this.plans = plans;
    this.#planSigs = sigs;
    return changed;
  }

  /**
   * Every tenant, in precedence order: the file's tenants without a valid record, in file order,
   * then the tenants with records, by id. A generator so the caller decides where to yield: it
   * yields after every SLICE placements.
   */
  *build(): Generator<void, void, void> {
    this.placePlans();
    const order = new Map<string, number>();
    const first: string[] = [];
    const byRecord = new Set<string>();
    let n = 0;
    for (const id of tenantIds(this.file.tenants)) {
      order.set(id, order.size);
      if (this.#validRecord(id) === undefined) first.push(id);
      else byRecord.add(id);
      if (++n % SLICE === 0) yield;
    }
    this.#fileOrder = order;
    for (const id of this.redis.tenants.keys()) {
      if (!order.has(id)) byRecord.add(id);
      if (++n % SLICE === 0) yield;
    }
    for (const id of first) {
      this.place(id);
      if (++n % SLICE === 0) yield;
    }
    for (const id of [...byRecord].sort()) {
      this.place(id);
      if (++n % SLICE === 0) yield;
    }
    // Built: holding the index it replaced would keep every earlier one alive.
    this.previous = undefined;
  }

  /**
   * Places tenant `id` again from the inputs as they are now: its record or file version, its
   * status override and storage. False, with nothing changed, when the result would depend on
   * other tenants' order (it outranks a tenant in force it clashes with, or it freed what a refused
   * tenant wanted): the caller then runs a full build.
   */
  place(id: string): boolean {
    const before = this.records.get(id);
    const beforeTenant = this.byId.get(id);
    if (before !== undefined) this.#release(id, beforeTenant!);
    this.#rejected.delete(`tenant:${id}`);
    this.#conflicted.delete(id);
    let placed: Candidate | undefined;
    for (const c of this.#candidates(id)) {
      const clash = this.#clash(id, c.raw);
      if (clash === undefined) {
        placed = c;
        break;
      }
      if (clash.other !== undefined && this.#outranks(id, clash.other)) {
        if (before !== undefined) this.#admit(id, before, beforeTenant!);
        return false;
      }
      const problem = c.source === 'file' ? `tenants.${id}.${clash.problem}` : clash.problem;
      this.#reject({ kind: 'tenant', id, source: c.source, conflict: true, problems: [problem] });
      this.#conflicted.add(id);
    }
    if (placed !== undefined) {
      this.#admit(id, placed.raw, this.#compiled(id, placed.raw, before, beforeTenant));
      if (placed.source === 'redis') this.fromRecord.add(id);
    } else {
      this.storage.delete(id);
      this.blocked.delete(id);
    }
    // Something this tenant held is free now: a refused tenant may get it, in precedence order.
    if (before !== undefined && this.#conflicted.size > 0 && !this.#holdsAll(id, before)) return false;
    return true;
  }

  /** After a reload that left `id`'s file entry equal: the new file's object stands for it, so later builds see it unchanged. */
  adopt(id: string, raw: RawTenant): void {
    const now = this.records.get(id);
    // A read sent as its changes shares the unchanged objects already (config/read-worker.ts).
    if (now !== undefined && now !== raw && !this.fromRecord.has(id)) this.records.set(id, raw);
  }

  /** Applies the storage usage recorded for `id` (the gate, with its hysteresis). */
  placeStorage(id: string): void {
    const tenant = this.byId.get(id);
    if (tenant === undefined) return;
    const text = this.redis.storage[id];
    const used = text === undefined ? undefined : Number(text);
    if (used !== undefined && Number.isFinite(used)) this.storage.set(id, used);
    else this.storage.delete(id);
    const blockedBefore = this.blocked.has(id) || (this.previous?.blocked.has(id) ?? false);
    if (storageVerdict(this.storage.get(id), tenant.plan.storageBytes, blockedBefore)) this.blocked.add(id);
    else this.blocked.delete(id);
  }

  /** Would a record `raw` for `id` be placed now? The clash it would meet, or the problems; null when it would. */
  judge(id: string, raw: RawTenant): { problems: string[]; conflict: boolean } | null {
    const problems = this.#checkRecord(id, raw);
    if (problems.length > 0) return { problems, conflict: false };
    const clash = this.#clash(id, raw);
    if (clash === undefined) return null;
    // Taking something from a tenant it outranks would push that tenant out: a conflict too.
    if (clash.other !== undefined && this.#outranks(id, clash.other, 'redis')) {
      const seen = pairClash(clash.other, this.records.get(clash.other)!, id, raw, this.identitiesOf)?.problem ?? clash.problem;
      return { problems: [`would displace tenant "${clash.other}": ${seen}`], conflict: true };
    }
    return { problems: [clash.problem], conflict: true };
  }

  #reject(r: Rejection): void {
    const key = `${r.kind}:${r.id}`;
    const list = this.#rejected.get(key);
    if (list === undefined) this.#rejected.set(key, [r]);
    else list.push(r);
  }

  /** A candidate's problems without looking at other tenants. */
  #check(id: string, raw: RawTenant): string[] {
    const problems: string[] = [];
    if (!ID_PATTERN.test(id)) problems.push(badId(id));
    if (!this.plans.has(raw.plan)) problems.push(`plan: unknown plan "${raw.plan}"`);
    return problems;
  }

  /** A record's problems: a candidate's, and a key that is not inline or a JWKS the edge would not fetch (src/auth/key-files.ts). */
  #checkRecord(id: string, raw: RawTenant): string[] {
    return [...this.#check(id, raw), ...recordAuthProblems(raw.auth, this.file.auth?.jwks)];
  }

  /** The record of `id` when it is valid and not deleted. */
  #validRecord(id: string): RawTenant | undefined {
    if (this.redis.deleted.has(id)) return undefined;
    const parsed = this.#parse(id);
    return parsed === undefined || Array.isArray(parsed) || this.#checkRecord(id, parsed).length > 0 ? undefined : parsed;
  }

  #parse(id: string): RawTenant | string[] | undefined {
    const text = this.redis.tenants.get(id);
    if (text === undefined) {
      this.#parsed.delete(id);
      return undefined;
    }
    const known = this.#parsed.get(id) ?? (this.previous === undefined ? undefined : this.previous.#parsed.get(id));
    if (known?.text === text) {
      this.#parsed.set(id, known);
      return known.value;
    }
    const value = parseRecord(text, tenantSchema) as RawTenant | string[];
    this.#parsed.set(id, { text, value });
    return value;
  }

  /** The versions of `id` to try in turn (the record, then the file's); rejects the invalid ones. */
  #candidates(id: string): Candidate[] {
    const out: Candidate[] = [];
    const deleted = this.redis.deleted.has(id);
    const fromFile = this.file.tenants[id];
    let fileOk = false;
    if (fromFile !== undefined) {
      const problems = this.#check(id, fromFile);
      if (problems.length > 0) this.#reject({ kind: 'tenant', id, source: 'file', conflict: false, problems: problems.map((p) => `tenants.${id}.${p}`) });
      else fileOk = !deleted;
    }
    if (!deleted) {
      const parsed = this.#parse(id);
      const problems = parsed === undefined ? [] : Array.isArray(parsed) ? parsed : this.#checkRecord(id, parsed);
      if (problems.length > 0) this.#reject({ kind: 'tenant', id, source: 'redis', conflict: false, problems });
      else if (parsed !== undefined) out.push({ raw: parsed as RawTenant, source: 'redis' });
    }
    if (fileOk) out.push({ raw: fromFile!, source: 'file' });
    return out;
  }

  /** Precedence: 0 for a file tenant without a valid record (then file order), 1 for the others (then id). */
  #rank(id: string, source?: 'redis'): [number, number | string] {
    this.#fileOrder ??= new Map(tenantIds(this.file.tenants).map((t, i) => [t, i]));
    const order = this.#fileOrder.get(id) ?? -1;
    if (source === undefined && order >= 0 && this.#validRecord(id) === undefined) return [0, order];
    return [1, id];
  }

  /** True when tenant `id` comes before tenant `other` in precedence order. */
  #outranks(id: string, other: string, source?: 'redis'): boolean {
    const [a, x] = this.#rank(id, source);
    const [b, y] = this.#rank(other);
    return a !== b ? a < b : x < y;
  }

  #clash(id: string, raw: RawTenant): Clash | undefined {
    // Ids reach brokers and Redis keys verbatim, and a broker or a reader that folds case would merge them.
    const twin = this.#byFolded.get(id.toLowerCase());
    if (twin !== undefined && twin !== id) return { problem: caseTwin(id, twin), other: twin };
    for (const h of raw.hosts) {
      const other = this.byHost.get(canonicalHost(h))?.id;
      if (other !== undefined && other !== id) return { problem: `hosts: host "${canonicalHost(h)}" is already listed by tenant "${other}"`, other };
    }
    for (const b of raw.brokers) {
      for (const identity of this.identitiesOf(b)) {
        const shared = sharedBroker(id, raw, b, identity, this.#brokerUsers.get(identity), this.records);
        if (shared) return shared;
      }
    }
    if (raw.auth) {
      if (this.file.auth && sameTrust(raw.auth, this.file.auth))
        return { problem: 'auth: trusts the same tokens as the global auth settings (same key, no distinct issuer or audience)', other: undefined };
      for (const [other, auth] of this.#withAuth) {
        if (other !== id && sameTrust(raw.auth, auth))
          return { problem: `auth: trusts the same tokens as tenant "${other}" (same key, no distinct issuer or audience)`, other };
      }
    }
    return undefined;
  }

  /** The compiled tenant for `raw` with its status override; the one in force (or the previous index's) when nothing changed. */
  #compiled(id: string, base: RawTenant, before: RawTenant | undefined, beforeTenant: Tenant | undefined): Tenant {
    const override = this.redis.status[id];
    const status = override === 'active' || override === 'suspended' ? override : base.status;
    const plan = this.plans.get(base.plan)!;
    const lent = before === base ? beforeTenant : this.previous?.records.get(id) === base ? this.previous.byId.get(id) : undefined;
    if (lent !== undefined && lent.status === status && lent.plan === plan) return lent;
    return compileTenant(id, status === base.status ? base : { ...base, status }, plan);
  }

  #admit(id: string, raw: RawTenant, tenant: Tenant): void {
    this.records.set(id, raw);
    this.byId.set(id, tenant);
    for (const h of tenant.hosts) this.byHost.set(h, tenant);
    this.#byFolded.set(id.toLowerCase(), id);
    const brokerIds = [...new Set(raw.brokers.flatMap(this.identitiesOf))];
    this.#brokerIds.set(id, brokerIds);
    for (const b of brokerIds) {
      let users = this.#brokerUsers.get(b);
      if (users === undefined) {
        users = { all: new Set(), undeclared: new Set() };
        this.#brokerUsers.set(b, users);
      }
      users.all.add(id);
      if (!raw.tenancyAwareBrokers) users.undeclared.add(id);
    }
    for (const url of tenant.brokers) {
      const n = this.brokerUrls.get(url) ?? 0;
      if (n === 0 && !this.brokerMoves.has(url)) this.brokerMoves.set(url, false);
      this.brokerUrls.set(url, n + 1);
    }
    if (raw.auth) this.#withAuth.set(id, raw.auth);
    this.planTenants.set(tenant.plan.id, (this.planTenants.get(tenant.plan.id) ?? 0) + 1);
    this.placeStorage(id);
  }

  #release(id: string, tenant: Tenant): void {
    this.records.delete(id);
    this.fromRecord.delete(id);
    this.byId.delete(id);
    for (const h of tenant.hosts) if (this.byHost.get(h) === tenant) this.byHost.delete(h);
    if (this.#byFolded.get(id.toLowerCase()) === id) this.#byFolded.delete(id.toLowerCase());
    const brokerIds = this.#brokerIds.get(id) ?? [];
    this.#brokerIds.delete(id);
    for (const b of brokerIds) {
      const users = this.#brokerUsers.get(b);
      users?.all.delete(id);
      users?.undeclared.delete(id);
      if (users?.all.size === 0) this.#brokerUsers.delete(b);
    }
    for (const url of tenant.brokers) {
      const n = (this.brokerUrls.get(url) ?? 1) - 1;
      if (n === 0) {
        this.brokerUrls.delete(url);
        if (!this.brokerMoves.has(url)) this.brokerMoves.set(url, true);
      } else this.brokerUrls.set(url, n);
    }
    this.#withAuth.delete(id);
    const onPlan = (this.planTenants.get(tenant.plan.id) ?? 1) - 1;
    if (onPlan === 0) this.planTenants.delete(tenant.plan.id);
    else this.planTenants.set(tenant.plan.id, onPlan);
  }

  /** True when the version placed for `id` still holds everything `before` held (hosts, brokers, keys). */
  #holdsAll(id: string, before: RawTenant): boolean {
    const now = this.records.get(id);
    if (now === undefined) return false;
    if (now === before) return true;
    const hosts = new Set(now.hosts.map(canonicalHost));
    const brokers = new Set(now.brokers.flatMap(this.identitiesOf));
    return (
      before.hosts.every((h) => hosts.has(canonicalHost(h))) &&
      before.brokers.flatMap(this.identitiesOf).every((b) => brokers.has(b)) &&
      (before.auth === null || JSON.stringify(before.auth) === JSON.stringify(now.auth)) &&
      (!now.tenancyAwareBrokers || before.tenancyAwareBrokers)
    );
  }
}

/** Runs a build to the end at once (tests, the file check of compileTables). */
export function buildSnapshot(
  file: FileDirectory,
  records: RedisRecords,
  previous?: TenantIndex,
  identitiesOf?: BrokerIdentities,
): Built & { readonly snapshot: TenantIndex } {
  const index = new TenantIndex(file, records, previous, identitiesOf);
  for (const _ of index.build());
  return { snapshot: index, rejected: index.rejected };
}

/** The clash tenant `id` would meet were `other` (with `otherRaw`) the only other tenant in force. */
function pairClash(id: string, raw: RawTenant, other: string, otherRaw: RawTenant, identitiesOf: BrokerIdentities): Clash | undefined {
  if (id !== other && id.toLowerCase() === other.toLowerCase()) return { problem: caseTwin(id, other), other };
  const theirs = new Set(otherRaw.hosts.map(canonicalHost));
  for (const h of raw.hosts)
    if (theirs.has(canonicalHost(h))) return { problem: `hosts: host "${canonicalHost(h)}" is already listed by tenant "${other}"`, other };
  const users: BrokerUsers = { all: new Set([other]), undeclared: new Set(otherRaw.tenancyAwareBrokers ? [] : [other]) };
  const theirBrokers = new Set(otherRaw.brokers.flatMap(identitiesOf));
  for (const b of raw.brokers) {
    for (const identity of identitiesOf(b)) {
      const shared = theirBrokers.has(identity) ? sharedBroker(id, raw, b, identity, users, new Map([[other, otherRaw]])) : undefined;
      if (shared) return shared;
    }
  }
  if (raw.auth && otherRaw.auth && sameTrust(raw.auth, otherRaw.auth))
    return { problem: `auth: trusts the same tokens as tenant "${other}" (same key, no distinct issuer or audience)`, other };
  return undefined;
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
): Clash | undefined {
  // Each search ends within a step or two: the rule admits at most one undeclared user per broker.
  let other: string | undefined;
  for (const u of (raw.tenancyAwareBrokers ? users?.undeclared : users?.all) ?? []) {
    if (u !== id) {
      other = u;
      break;
    }
  }
  if (other === undefined) return undefined;
  const undeclared = [id, other].filter((t) => !(t === id ? raw : inForce.get(t)!).tenancyAwareBrokers);
  return {
    problem:
      `brokers: tenant "${id}" and tenant "${other}" both list broker "${url}" (host and port ${identityOf(url)}${identity === identityOf(url) ? '' : `, address ${identity}`}) and would read ` +
      `each other's queues: give each tenant its own brokers, or, for a broker that scopes data by x-queen-tenant, set ` +
      `tenancyAwareBrokers: true on ${undeclared.map((t) => `tenant "${t}"`).join(' and ')} (docs/tenancy.md)`,
    other,
  };
}

/** The problem of an id that differs from one in force only in case. */
function caseTwin(id: string, twin: string): string {
  return `id: tenant "${id}" differs from tenant "${twin}" only in case (tenant ids are unique regardless of case)`;
}

/** True when `next` differs from `prev` in anything a reader can observe. */
export function snapshotChanged(prev: Snapshot, next: Snapshot): boolean {
  return !sameMap(prev.byId, next.byId) || !sameMap(prev.plans, next.plans) || !sameMap(prev.storage, next.storage) || !sameSet(prev.blocked, next.blocked);
}

/** The tenants whose compiled object differs between two directories (added, removed or changed). */
export function changedTenants(prev: Snapshot, next: Snapshot): Set<string> {
  return runSteps(changedTenantsInSteps(prev, next));
}

/** changedTenants in steps: yields after every SLICE comparisons, so a caller may pause there. */
export function* changedTenantsInSteps(prev: Snapshot, next: Snapshot): Generator<void, Set<string>, void> {
  const out = new Set<string>();
  let n = 0;
  for (const [id, t] of next.byId) {
    if (prev.byId.get(id) !== t) out.add(id);
    if (++n % SLICE === 0) yield;
  }
  for (const id of prev.byId.keys()) {
    if (!next.byId.has(id)) out.add(id);
    if (++n % SLICE === 0) yield;
  }
  return out;
}

/** True when two maps hold the same values under the same keys. */
export function sameMap<V>(a: ReadonlyMap<string, V>, b: ReadonlyMap<string, V>): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) if (b.get(k) !== v) return false;
  return true;
}

function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false;
  for (const k of a) if (!b.has(k)) return false;
  return true;
}
