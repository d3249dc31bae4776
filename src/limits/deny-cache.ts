/**
 * Local deny cache: dimensions Redis just refused are refused here, with no round trip, until
 * they could pass. Sound because, between refusal and reset, other instances can only spend
 * more: a refused request-bucket stays empty until its wait ends, a message cost c refused
 * stays refused for every cost ≥ c, and a spent quota stays spent until the month ends (in
 * leased mode only for `quotaDenialMs`: slices held by other instances go back to the quota).
 * Entries are tied to the Tenant object, so a limits change (a new object) drops them.
 *
 * Past a request-bucket refusal's wait, the bucket has refilled by one request per interval at
 * most, whoever spends it. Before the body (probe), a tenant refused on its request rate is
 * therefore let through only as far as that refill goes, counted on a local copy of the bucket
 * (GCRA, as the store decides it), and refused beyond it: without the copy, every upload that
 * arrives once the wait ends would be read whole, only for all but one to be refused after it
 * (with 1 MiB bodies on 200 h2 streams: 2 MiB read per 429). The copy takes the store's bucket
 * state from every decision the store makes for the tenant, so a request let through that
 * never reached the store (a malformed body) holds back the copy by at most one interval. A full
 * copy still bounds a herd to the burst; it is dropped once it stayed full for a whole refill, the
 * tenant having stopped pressing its limit.
 */
import type { Tenant } from '../tenants/model.js';
import { DIM_MESSAGES, DIM_MONTH_BYTES, DIM_MONTH_MESSAGES, DIM_REQUESTS, EPSILON, gcraWait, type Decision, type LimitCost, type LimitPlan, type RefusalClass } from './verdict.js';

interface DenyEntry {
  readonly tenant: Tenant;
  /** Refused here until then. */
  readonly until: number;
  /** What Retry-After names: `until`, except for a quota rechecked before its month ends. */
  readonly retryAt: number;
  /** The refused cost; smaller costs may still pass. */
  readonly minCost: number;
}

/** The local copy of a request bucket the store refused (see the file comment). */
interface BucketCopy {
  readonly tenant: Tenant;
  /** GCRA theoretical arrival time: the bucket is full from then on. */
  tat: number;
  readonly intervalMs: number;
  readonly burst: number;
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
  /** Request buckets refused by the store, copied for probes before the body. */
  readonly #copies = new Map<string, BucketCopy>();
  readonly #quotaDenialMs: number;

  /** `quotaDenialMs`: how long a spent quota is refused here at most (the rest of the month by default). */
  constructor(quotaDenialMs = Infinity) {
    this.#quotaDenialMs = quotaDenialMs;
  }

  /**
   * A refusal if a cached dimension refuses this cost now; null to ask the store. A `probe` (a
   * request before its body) also counts against the copy of a refused request bucket, and takes
   * one request of it when nothing refuses.
   */
  check(tenant: Tenant, cost: LimitCost, now: number, probe = false): CachedDenial | null {
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
    // Only once the refusal's own wait is over (its entry gone) does the copy decide.
    const copy = probe && !entries[0] ? this.#copyOf(tenant, now) : undefined;
    if (copy) {
      const wait = gcraWait(copy.tat, now, 1, copy.intervalMs, copy.burst);
      if (wait > EPSILON) rateRetryAt = Math.max(rateRetryAt, now + wait);
    }
    if (quotaRetryAt === 0 && rateRetryAt === 0) {
      if (copy) copy.tat = Math.max(copy.tat, now) + copy.intervalMs;
      return null;
    }
    const bucket = this.#bucket.get(tenant.id);
    return {
      code: quotaRetryAt > 0 ? 'quota_exceeded' : 'rate_limited',
      retryAfterSec: quotaRetryAt > 0 ? Math.max(1, Math.ceil((quotaRetryAt - now) / 1000)) : Math.max(1, Math.ceil((rateRetryAt - now) / 1000 - EPSILON)),
      remaining: bucket?.remaining ?? 0,
      resetMs: Math.max(0, (bucket?.resetAt ?? now) - now),
    };
  }

  /** The store's request bucket after a decision it admitted: the copy of a refused one follows it. */
  observe(tenant: Tenant, d: Decision, now: number): void {
    const copy = this.#copies.get(tenant.id);
    if (copy) copy.tat = now + d.resetMs;
  }

  /** Remembers the cacheable dimensions of a refused decision (`plan`: the bucket the store decided with). */
  record(tenant: Tenant, d: Decision, cost: LimitCost, now: number, monthEndMs: number, plan: LimitPlan): void {
    if (d.refused & DIM_REQUESTS) this.#copies.set(tenant.id, { tenant, tat: now + d.resetMs, intervalMs: plan.requestIntervalMs, burst: plan.requestBurst });
    else this.observe(tenant, d, now);
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

  /** The copy of the tenant's refused request bucket; one that stayed full for a whole refill is dropped. */
  #copyOf(tenant: Tenant, now: number): BucketCopy | undefined {
    const copy = this.#copies.get(tenant.id);
    if (!copy) return undefined;
    if (copy.tenant === tenant && now < copy.tat + copy.burst * copy.intervalMs) return copy;
    this.#copies.delete(tenant.id);
    return undefined;
  }
}
