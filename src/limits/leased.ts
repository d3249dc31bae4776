/**
 * `limits.mode: leased` (docs/limits.md, "Leased mode"): each instance takes a slice of a
 * tenant's request bucket from Redis in one script call (LEASE_LUA) and admits requests locally
 * from it, so a steady stream costs one round trip per slice instead of one per request. The
 * slice is taken from the shared bucket before it is spent, so the bucket is never overdrawn; what
 * an instance holds unspent (at most sliceFraction × burst over all instances) is the bound by
 * which a window can see more than the exact limiter would admit. Unspent tokens go back when the
 * lease ends: with the next slice, or from the sweep for tenants that went quiet.
 *
 * Only the request rate is leased. A request that also costs messages, a parked-poll slot or
 * bytes against a byte quota takes the exact admit (one round trip, every dimension atomically),
 * as does every request while the exact limiter is not on Redis (its fail mode decides). A lease
 * call that fails hands the request to the exact admit too, so failMode semantics stay those of
 * the exact limiter; the slice of a failed call is treated as lost (never spent twice).
 */
import type { Cluster, Redis } from 'ioredis';
import type { Tenant } from '../tenants/model.js';
import { requestBucketKey } from '../redis/keys.js';
import { evalScript } from '../redis/scripts.js';
import { rateLimitHeaders } from './headers.js';
import { callAgainAfterMs, leasable, leaseSlice, type LeaseSettings } from './lease-slice.js';
import { LEASE_LUA } from './lease-script.js';
import { PlanCache, refusedAdmission, type Admission, type AdmitInput, type EdgeLimiter, type PlanEntry } from './limiter.js';
import { scriptSha } from './script.js';
import { DIM_REQUESTS, classifyRefusal } from './verdict.js';

const LEASE_SHA = scriptSha(LEASE_LUA);

/** One tenant's slice on this instance. */
interface Lease {
  /** The tenant object the slice was taken for (a directory change makes a new one). */
  tenant: Tenant;
  entry: PlanEntry;
  /** Unspent tokens of the current slice. */
  tokens: number;
  /** After this, unspent tokens may not be spent: they go back with the next call. */
  expiresAt: number;
  /** No lease call before this while the slice is spent: the bucket could not give a full slice earlier. */
  readyAt: number;
  /** The bucket after the last grant, for the RateLimit field. */
  bucketRemaining: number;
  bucketFullAt: number;
  /** The lease call in flight, shared by the requests that wait for it. */
  inflight: Promise<boolean> | null;
}

/** Leased request-rate admits in front of the exact limiter (see the file comment). */
export class LeasedLimiter implements EdgeLimiter {
  readonly #exact: EdgeLimiter;
  readonly #redis: Redis | Cluster;
  readonly #prefix: string;
  readonly #settings: LeaseSettings;
  readonly #clock: () => number;
  readonly #plans = new PlanCache();
  readonly #leases = new Map<string, Lease>();
  #timer: NodeJS.Timeout | null = null;

  constructor(exact: EdgeLimiter, redis: Redis | Cluster, prefix: string, settings: LeaseSettings, clock: () => number = Date.now) {
    this.#exact = exact;
    this.#redis = redis;
    this.#prefix = prefix;
    this.#settings = settings;
    this.#clock = clock;
  }

  preAdmit(input: AdmitInput): Admission | null {
    return this.#exact.preAdmit(input);
  }

  admit(input: AdmitInput): Admission | Promise<Admission> {
    const entry = this.#plans.get(input.tenant, 1);
    if (!leasable(entry.plan, input) || this.#exact.mode() !== 'redis') return this.#exact.admit(input);
    const now = this.#clock();
    let lease = this.#leases.get(input.tenant.id);
    if (lease && lease.tenant !== input.tenant) lease = this.#replaced(lease, input.tenant, entry);
    if (!lease) {
      lease = { tenant: input.tenant, entry, tokens: 0, expiresAt: 0, readyAt: 0, bucketRemaining: 0, bucketFullAt: 0, inflight: null };
      this.#leases.set(input.tenant.id, lease);
    }
    const taken = take(lease, now);
    if (taken) return taken;
    // The exact path's deny cache knows the bucket is empty: no lease call can succeed before then.
    const cached = this.#exact.preAdmit(input);
    if (cached) return cached;
    if (now < lease.readyAt) return refusal(lease, now);
    return this.#renewThenTake(lease, input);
  }

  mode(): string {
    return this.#exact.mode();
  }

  liveInstances(): number {
    return this.#exact.liveInstances();
  }

  async start(): Promise<void> {
    await this.#exact.start();
    this.#timer = setInterval(() => this.#sweep(), this.#settings.durationMs);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await Promise.all([...this.#leases.values()].map(async (l) => {
      await l.inflight;
      await this.#giveBack(l);
    }));
    this.#leases.clear();
    await this.#exact.close();
  }

  /** A tenant whose record changed: the slice stays if its bucket did, else it goes back (priced at the old rate). */
  #replaced(lease: Lease, tenant: Tenant, entry: PlanEntry): Lease | undefined {
    const was = lease.entry.plan;
    if (was.requestIntervalMs === entry.plan.requestIntervalMs && was.requestBurst === entry.plan.requestBurst) {
      lease.tenant = tenant;
      lease.entry = entry;
      return lease;
    }
    this.#leases.delete(tenant.id);
    void (lease.inflight ?? Promise.resolve(true)).then(() => this.#giveBack(lease));
    return undefined;
  }

  async #renewThenTake(lease: Lease, input: AdmitInput): Promise<Admission> {
    lease.inflight ??= this.#call(lease, leaseSlice(lease.entry.plan, this.#exact.liveInstances(), this.#settings)).finally(() => {
      lease.inflight = null;
    });
    if (!(await lease.inflight)) return this.#exact.admit(input);
    const now = this.#clock();
    return take(lease, now) ?? refusal(lease, now);
  }

  /** Gives back the unspent tokens and takes up to `wanted` in one call; false when Redis did not answer. */
  async #call(lease: Lease, wanted: number): Promise<boolean> {
    const now = this.#clock();
    const returned = lease.tokens;
    lease.tokens = 0;
    let reply: [number, number, string, string];
    try {
      reply = await this.#eval(lease, now, returned, wanted);
    } catch {
      return false;
    }
    lease.tokens = reply[0];
    lease.expiresAt = now + this.#settings.durationMs;
    lease.readyAt = now + callAgainAfterMs(reply[0], wanted, Number(reply[3]), this.#exact.liveInstances(), lease.entry.plan.requestIntervalMs);
    lease.bucketRemaining = reply[1];
    lease.bucketFullAt = now + Number(reply[2]);
    return true;
  }

  /** Returns a slice's unspent tokens without taking any; a failure leaves them lost (under-admission, never double spending). */
  async #giveBack(lease: Lease): Promise<void> {
    const returned = lease.tokens;
    if (returned === 0) return;
    lease.tokens = 0;
    await this.#eval(lease, this.#clock(), returned, 0).catch(() => {});
  }

  #eval(lease: Lease, now: number, returned: number, wanted: number): Promise<[number, number, string, string]> {
    const plan = lease.entry.plan;
    const args = [now, plan.requestIntervalMs, plan.requestBurst, returned, wanted];
    const key = requestBucketKey(this.#prefix, lease.tenant.id);
    return evalScript(this.#redis, LEASE_SHA, LEASE_LUA, [key], args) as Promise<[number, number, string, string]>;
  }

  /** Returns the expired slices of tenants that went quiet, and forgets idle leases. */
  #sweep(): void {
    const now = this.#clock();
    for (const [id, lease] of this.#leases) {
      if (lease.inflight || now < lease.expiresAt) continue;
      if (lease.tokens > 0) void this.#giveBack(lease);
      else if (now >= lease.readyAt) this.#leases.delete(id);
    }
  }
}

/** Spends one token of a live slice, or null. */
function take(lease: Lease, now: number): Admission | null {
  if (lease.tokens === 0 || now >= lease.expiresAt) return null;
  lease.tokens--;
  // Approximate: the bucket as of the last grant, plus what this instance still holds.
  const headers = rateLimitHeaders(lease.entry.policy, lease.bucketRemaining + lease.tokens, Math.max(0, lease.bucketFullAt - now));
  return { refusal: null, headers, release: null };
}

/** A refusal until the bucket could give a slice again; it takes nothing. */
function refusal(lease: Lease, now: number): Admission {
  const waitMs = Math.max(lease.readyAt - now, lease.entry.plan.requestIntervalMs);
  const cls = classifyRefusal(DIM_REQUESTS, waitMs, 0, now, 0);
  return refusedAdmission(cls, rateLimitHeaders(lease.entry.policy, 0, Math.max(0, lease.bucketFullAt - now)));
}
