/**
 * Runtime shapes of plans and tenants: compiled once from the config file (and later from Redis
 * records), frozen, and read by the pipeline without re-parsing.
 */
import { MAX_HOST_LENGTH, type BrokerVersion, type Feature, type RawPlan, type RawTenant, type RawTenantAuth } from '../config/schema.js';
import { compileCorsPolicy, type CorsPolicy } from '../cors/policy.js';
import { Interner, listKey } from '../cache/intern.js';

/** Tenant and plan ids: usable inside a Redis hash tag and a URL path segment. */
export const ID_PATTERN = /^[A-Za-z0-9._-]{1,128}$/;

/** Per-tenant limits (docs/limits.md); a plan's limits merged with the tenant's overrides. */
export interface Limits {
  readonly requestsPerSec: number;
  readonly requestBurst: number;
  readonly messagesPerSec: number;
  readonly messageBurst: number;
  readonly parkedPolls: number;
  readonly maxPayloadBytes: number;
  readonly maxBatch: number;
}

export interface Quotas {
  readonly messagesPerMonth: number;
  readonly ingressBytesPerMonth: number;
}

export interface Plan {
  readonly id: string;
  readonly features: ReadonlySet<Feature>;
  readonly limits: Limits;
  readonly quotas: Quotas;
  readonly storageBytes: number;
  /** Trace sampling ratio of its tenants; null = the edge's (`tracing.ratio`). */
  readonly traceRatio: number | null;
}

export interface Tenant {
  readonly id: string;
  readonly status: 'active' | 'suspended';
  readonly plan: Plan;
  /** Plan limits with the tenant's overrides applied. */
  readonly limits: Limits;
  readonly hosts: readonly string[];
  /** Broker base URLs, without trailing slash. */
  readonly brokers: readonly string[];
  /** The brokers scope data by `x-queen-tenant` (may be shared): every request carries it. */
  readonly tenancyAwareBrokers: boolean;
  /** Which routes the brokers register: a route they do not is answered 404 by the edge. */
  readonly brokerVersion: BrokerVersion;
  readonly cors: CorsPolicy;
  readonly boundedLoadFactor: number | null;
  /** The tenant's own token settings (docs/tenancy.md); null = global keys plus the tenant claim. */
  readonly auth: Readonly<RawTenantAuth> | null;
  /** Trace sampling ratio: the tenant's own, else its plan's; null = the edge's. */
  readonly traceRatio: number | null;
}

export function compilePlan(id: string, raw: RawPlan): Plan {
  return Object.freeze({
    id,
    features: new Set(raw.features),
    limits: Object.freeze({ ...raw.limits }),
    quotas: Object.freeze({ ...raw.quotas }),
    storageBytes: raw.storageBytes,
    traceRatio: raw.traceRatio ?? null,
  });
}

/** True for a name (canonicalHost form) no DNS name can be: what a request, the file or the admin API may not use. */
export function hostTooLong(canonical: string): boolean {
  return canonical.length > MAX_HOST_LENGTH;
}

/**
 * A host as tenants are listed and found by it: lower case, without the trailing dot of a fully
 * qualified name (`acme.example.com.` is `acme.example.com`, RFC 1034 §3.1), so neither spelling,
 * in the configuration or in a request, can miss the tenant and fall back to the token's claim.
 */
export function canonicalHost(name: string): string {
  const lower = name.toLowerCase();
  return lower.length > 1 && lower.endsWith('.') ? lower.slice(0, -1) : lower;
}

// Shared between tenants that have the same: most tenants list no CORS origins of their own, and
// many share brokers (docs/tenancy.md, "Many tenants").
const corsPolicies = new Interner<CorsPolicy>();
const brokerLists = new Interner<readonly string[]>();

/** The compiled CORS policy of an origin list, one per distinct list. */
export function sharedCorsPolicy(origins: readonly string[]): CorsPolicy {
  return corsPolicies.get(listKey(origins), () => compileCorsPolicy(origins));
}

/** A broker list without trailing slashes, one frozen array per distinct list. */
export function sharedBrokers(brokers: readonly string[]): readonly string[] {
  const trimmed = brokers.map((b) => b.replace(/\/+$/, ''));
  return brokerLists.get(listKey(trimmed), () => Object.freeze(trimmed));
}

/** `auth`, `tenancyAwareBrokers` and `brokerVersion` may be left out: no identity provider of its own, dedicated 0.15.1 brokers. */
export function compileTenant(
  id: string,
  raw: Omit<RawTenant, 'auth' | 'tenancyAwareBrokers' | 'brokerVersion'> & {
    readonly auth?: RawTenantAuth | null;
    readonly tenancyAwareBrokers?: boolean;
    readonly brokerVersion?: BrokerVersion;
  },
  plan: Plan,
): Tenant {
  const hosts = raw.hosts.map(canonicalHost);
  return Object.freeze({
    id,
    status: raw.status,
    plan,
    // A tenant without overrides reads its plan's limits object.
    limits: raw.limits === undefined || Object.keys(raw.limits).length === 0 ? plan.limits : Object.freeze({ ...plan.limits, ...raw.limits }),
    hosts: Object.freeze(hosts.length === 0 ? NO_HOSTS : hosts),
    brokers: sharedBrokers(raw.brokers),
    tenancyAwareBrokers: raw.tenancyAwareBrokers ?? false,
    brokerVersion: raw.brokerVersion ?? '0.15.1',
    cors: sharedCorsPolicy(raw.cors.origins),
    boundedLoadFactor: raw.boundedLoadFactor,
    auth: raw.auth ? Object.freeze({ ...raw.auth }) : null,
    traceRatio: raw.traceRatio ?? plan.traceRatio,
  });
}

const NO_HOSTS: readonly string[] = Object.freeze([]);

/** Read access to the current tenants (the pipeline's view of the tenant store). */
export interface TenantDirectory {
  byId(id: string): Tenant | undefined;
  /** Host header value, lower-cased, without port. */
  byHost(host: string): Tenant | undefined;
  /** Storage bytes used as last recorded by the control plane (undefined: unknown). */
  storageUsed(id: string): number | undefined;
  all(): Iterable<Tenant>;
}
