/**
 * Runtime shapes of plans and tenants: compiled once from the config file (and later from Redis
 * records), frozen, and read by the pipeline without re-parsing.
 */
import type { Feature, RawPlan, RawTenant } from '../config/schema.js';
import { compileCorsPolicy, type CorsPolicy } from '../cors/policy.js';

/** Per-tenant limits (DESIGN §5); a plan's limits merged with the tenant's overrides. */
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
  readonly cors: CorsPolicy;
  readonly boundedLoadFactor: number | null;
}

export function compilePlan(id: string, raw: RawPlan): Plan {
  return Object.freeze({
    id,
    features: new Set(raw.features),
    limits: Object.freeze({ ...raw.limits }),
    quotas: Object.freeze({ ...raw.quotas }),
    storageBytes: raw.storageBytes,
  });
}

export function compileTenant(id: string, raw: RawTenant, plan: Plan): Tenant {
  return Object.freeze({
    id,
    status: raw.status,
    plan,
    limits: Object.freeze({ ...plan.limits, ...(raw.limits ?? {}) }),
    hosts: Object.freeze(raw.hosts.map((h) => h.toLowerCase())),
    brokers: Object.freeze(raw.brokers.map((b) => b.replace(/\/+$/, ''))),
    cors: compileCorsPolicy(raw.cors.origins),
    boundedLoadFactor: raw.boundedLoadFactor,
  });
}

/** Read access to the current tenants; the Redis-backed store (issue 3) implements it too. */
export interface TenantDirectory {
  byId(id: string): Tenant | undefined;
  /** Host header value, lower-cased, without port. */
  byHost(host: string): Tenant | undefined;
  /** Storage bytes used as last recorded by the control plane (undefined: unknown). */
  storageUsed(id: string): number | undefined;
  all(): Iterable<Tenant>;
}

/** The file-only directory: the static base used when no Redis is configured. */
export class StaticTenantDirectory implements TenantDirectory {
  readonly #byId = new Map<string, Tenant>();
  readonly #byHost = new Map<string, Tenant>();

  constructor(tenants: Iterable<Tenant>) {
    for (const t of tenants) {
      this.#byId.set(t.id, t);
      for (const h of t.hosts) this.#byHost.set(h, t);
    }
  }

  byId(id: string): Tenant | undefined {
    return this.#byId.get(id);
  }

  byHost(host: string): Tenant | undefined {
    return this.#byHost.get(host);
  }

  storageUsed(): number | undefined {
    return undefined;
  }

  all(): Iterable<Tenant> {
    return this.#byId.values();
  }
}
