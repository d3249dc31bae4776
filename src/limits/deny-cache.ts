/**
 * Local deny cache: dimensions Redis just refused are refused here, with no round trip, until
 * they could pass. Sound because, between refusal and reset, other instances can only spend
 * more: a refused request-bucket stays empty until its wait ends, a message cost c refused
 * stays refused for every cost ≥ c, and a spent quota stays spent until the month ends (in
 * leased mode only for `quotaDenialMs`: slices held by other instances go back to the quota).
 * Entries are tied to the Tenant object, so a limits change (a new object) drops them.
 */
import type { Tenant } from '../tenants/model.js';
import { DIM_MESSAGES, DIM_MONTH_BYTES, DIM_MONTH_MESSAGES, DIM_REQUESTS, EPSILON, type Decision, type LimitCost, type RefusalClass } from './verdict.js';

interface DenyEntry {
  readonly tenant: Tenant;
  /** Refused here until then. */
  readonly until: number;
  /** What Retry-After names: `until`, except for a quota rechecked before its month ends. */
  readonly retryAt: number;
  /** The refused cost; smaller costs may still pass. */
  readonly minCost: number;
}

/** A refusal answered from the cache, with what the RateLimit field should say. */
export interface CachedDenial extends RefusalClass {
  readonly remaining: number;
  readonly resetMs: number;
}

/** Dimensions in slot order: requests, messages, month messages, month bytes. */
const DIMS = [DIM_REQUESTS, DIM_MESSAGES, DIM_MONTH_MESSAGES, DIM_MONTH_BYTES] as const;

function costOf(slot: number, cost: LimitCost): number {
  return slot === 0 ? 1 : slot === 3 ? cost.ingressBytes : cost.messages;
}

/** Per-tenant deny entries; see the file comment. */
export class DenyCache {
  readonly #byTenant = new Map<string, (DenyEntry | undefined)[]>();
  /** Request-bucket state at the last refusal, for the RateLimit field of cached denials. */
  readonly #bucket = new Map<string, { remaining: number; resetAt: number }>();
  readonly #quotaDenialMs: number;

  /** `quotaDenialMs`: how long a spent quota is refused here at most (the rest of the month by default). */
  constructor(quotaDenialMs = Infinity) {
    this.#quotaDenialMs = quotaDenialMs;
  }

  /** A refusal if a cached dimension refuses this cost now; null to ask the store. */
  check(tenant: Tenant, cost: LimitCost, now: number): CachedDenial | null {
    const entries = this.#byTenant.get(tenant.id);
    if (!entries) return null;
    let quotaRetryAt = 0;
    let rateRetryAt = 0;
    for (let slot = 0; slot < DIMS.length; slot++) {
      const e = entries[slot];
      if (!e) continue;
      if (e.tenant !== tenant || now >= e.until) {
        entries[slot] = undefined;
        continue;
      }
      const c = costOf(slot, cost);
      if (c === 0 || c < e.minCost) continue;
      if (slot >= 2) quotaRetryAt = Math.max(quotaRetryAt, e.retryAt);
      else rateRetryAt = Math.max(rateRetryAt, e.retryAt);
    }
    if (quotaRetryAt === 0 && rateRetryAt === 0) return null;
    const bucket = this.#bucket.get(tenant.id);
    return {
      code: quotaRetryAt > 0 ? 'quota_exceeded' : 'rate_limited',
      retryAfterSec: quotaRetryAt > 0 ? Math.max(1, Math.ceil((quotaRetryAt - now) / 1000)) : Math.max(1, Math.ceil((rateRetryAt - now) / 1000 - EPSILON)),
      remaining: bucket?.remaining ?? 0,
      resetMs: Math.max(0, (bucket?.resetAt ?? now) - now),
    };
  }

  /** Remembers the cacheable dimensions of a refused decision. */
  record(tenant: Tenant, d: Decision, cost: LimitCost, now: number, monthEndMs: number): void {
    let entries = this.#byTenant.get(tenant.id);
    if (!entries) {
      entries = [undefined, undefined, undefined, undefined];
      this.#byTenant.set(tenant.id, entries);
    }
    for (let slot = 0; slot < DIMS.length; slot++) {
      if (!(d.refused & DIMS[slot]!)) continue;
      const retryAt = slot === 0 ? now + d.requestWaitMs : slot === 1 ? now + d.messageWaitMs : monthEndMs;
      const until = slot >= 2 ? Math.min(retryAt, now + this.#quotaDenialMs) : retryAt;
      entries[slot] = { tenant, until, retryAt, minCost: costOf(slot, cost) };
    }
    this.#bucket.set(tenant.id, { remaining: d.remaining, resetAt: now + d.resetMs });
  }
}
