/**
 * Local deny cache: dimensions Redis just refused are refused here, with no round trip, until
 * they could pass. Sound because, between refusal and reset, other instances can only spend
 * more: a refused request-bucket stays empty until its wait ends, a message cost c refused
 * stays refused for every cost ≥ c, and a spent quota stays spent until the month ends (in
 * leased mode only for `quotaDenialMs`: slices held by other instances go back to the quota).
 * Entries are tied to the Tenant object, so a limits change (a new object) drops them.
 *
 * Heads in flight: past a request-rate refusal's wait, the store's bucket holds what refilled
 * since its last decision, whoever spends it. Before its body, a request of a tenant the store
 * once refused on its request rate is let through only while fewer of the tenant's heads are in
 * flight than the bucket holds, as its last decision and the refill since tell (the same GCRA);
 * the rest get 429 from their heads. A head is in flight from the moment it is let through until
 * its admit is decided, its request ends without one (a malformed body, a client gone), or one
 * interval has passed, whichever comes first: a head whose end was never seen (a pipelined
 * request whose connection died, say) or that is still uploading stops holding the others back
 * after an interval, when the bucket has refilled by one anyway. So bodies read stay within about
 * twice what the bucket refills per interval, whatever the concurrency: without it, every upload that arrived
 * once the wait ended was read whole, only for all but one to be refused after it (1 MiB pushes
 * on 200 h2 streams: 2 MiB read per 429). The bucket is only ever the store's, set by its
 * decisions for the tenant; the count lives as long as the tenant's record, so a herd after a
 * long pause is still bounded by the burst.
 */
import type { Tenant } from '../tenants/model.js';
import {
  DIM_MESSAGES,
  DIM_MONTH_BYTES,
  DIM_MONTH_MESSAGES,
  DIM_REQUESTS,
  EPSILON,
  type Decision,
  type LimitCost,
  type LimitPlan,
  type RefusalClass,
} from './verdict.js';

interface DenyEntry {
  readonly tenant: Tenant;
  /** Refused here until then. */
  readonly until: number;
  /** What Retry-After names: `until`, except for a quota rechecked before its month ends. */
  readonly retryAt: number;
  /** The refused cost; smaller costs may still pass. */
  readonly minCost: number;
}

/** A request bucket the store refused once, as its last decision left it, and the heads in flight (see the file comment). */
interface HeadCount {
  readonly tenant: Tenant;
  /** The store's GCRA theoretical arrival time after its last decision. */
  tat: number;
  readonly intervalMs: number;
  readonly burst: number;
  /** Heads let through, in start order; a release marks its own one done. */
  readonly heads: { readonly at: number; live: boolean }[];
}

/**
 * A bucket holding this many requests has room for any herd worth stopping: its heads are not
 * counted (which also bounds the list of heads kept per tenant: one is added only below it).
 */
const MAX_COUNTED_HEADS = 64;

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
  readonly #heads = new Map<string, HeadCount>();
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

  /**
   * A request head before its body, once check() refused nothing: a 429 while the tenant's heads
   * in flight already take what its request bucket holds; else null (not counted: the store never
   * refused its request rate) or the release that ends this head's count, to be called once its
   * admit is decided or its request ended without one.
   */
  head(tenant: Tenant, now: number): CachedDenial | (() => void) | null {
    const h = this.#heads.get(tenant.id);
    if (h === undefined) return null;
    if (h.tenant !== tenant) {
      // The tenant's record changed: what the old one's refusal taught is dropped.
      this.#heads.delete(tenant.id);
      return null;
    }
    const backlog = Math.max(h.tat, now) - now;
    const held = Math.floor((h.burst * h.intervalMs - backlog) / h.intervalMs + EPSILON);
    if (held >= MAX_COUNTED_HEADS) return null;
    // Keep the heads still counting, in start order: not released, let through less than an interval ago.
    const heads = h.heads;
    let live = 0;
    for (const e of heads) if (e.live && e.at > now - h.intervalMs) heads[live++] = e;
    heads.length = live;
    if (live >= held) {
      // Until the bucket holds one more than the heads in flight take, or the oldest of them stops counting.
      const refillMs = backlog - (h.burst - live - 1) * h.intervalMs;
      const waitMs = live > 0 ? Math.min(refillMs, heads[0]!.at + h.intervalMs - now) : refillMs;
      return { code: 'rate_limited', retryAfterSec: Math.max(1, Math.ceil(waitMs / 1000 - EPSILON)), remaining: 0, resetMs: backlog };
    }
    const entry = { at: now, live: true };
    heads.push(entry);
    return () => {
      entry.live = false;
    };
  }

  /** A decision of the store for the tenant (an admit, or a refusal on any dimension): its head count follows the bucket. */
  observe(tenant: Tenant, d: Decision, now: number): void {
    const h = this.#heads.get(tenant.id);
    if (h?.tenant === tenant) h.tat = now + d.resetMs;
  }

  /** Remembers the cacheable dimensions of a refused decision (`plan`: the one the store decided with). */
  record(tenant: Tenant, d: Decision, cost: LimitCost, now: number, monthEndMs: number, plan: LimitPlan): void {
    if (this.#heads.get(tenant.id)?.tenant === tenant) this.observe(tenant, d, now);
    else if (d.refused & DIM_REQUESTS)
      this.#heads.set(tenant.id, { tenant, tat: now + d.resetMs, intervalMs: plan.requestIntervalMs, burst: plan.requestBurst, heads: [] });
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
