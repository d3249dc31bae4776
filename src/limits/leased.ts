/**
 * `limits.mode: leased` (docs/limits.md, "Leased mode"): each instance takes slices of a tenant's
 * shared limits from Redis in one script call (LEASE_LUA) and admits requests locally from them,
 * so a steady stream costs one round trip per slice instead of one per request. Four dimensions
 * are leased: the request bucket, the message bucket, and the month's message and byte quotas.
 * Slices are taken from the shared state before they are spent, so a bucket is never overdrawn
 * and a quota never exceeded; what an instance holds unspent (at most sliceFraction × burst of a
 * bucket over all instances) is the bound by which a window can see more than the exact limiter
 * would admit. Unspent slices go back when the lease ends: with the next call, or from the sweep
 * for tenants that went quiet.
 *
 * The exact admit (one round trip, every dimension atomically) still decides parked polls (their
 * slot is a live count, not a rate), pushes larger than the message burst (only it lets them
 * through as debt), pushes while a quota is too near its end to be sliced, and every request while
 * the exact limiter is not on Redis (its fail mode decides). A lease call that fails hands the
 * request to the exact admit too, so failMode semantics stay those of the exact limiter; the
 * slices of a failed call are treated as lost (never spent twice): a bucket refills, a month quota
 * keeps them counted (under-admission by at most one slice per failed call).
 */
import type { Cluster, Redis } from 'ioredis';
import type { Tenant } from '../tenants/model.js';
import { limiterKeys, monthKeyTtlMs } from '../redis/keys.js';
import { evalScript } from '../redis/scripts.js';
import { rateLimitHeaders } from './headers.js';
import { callAgainAfterMs, leasable, leaseWants, observeTraffic, type LeaseSettings, type LeaseTraffic, type LeaseWants } from './lease-slice.js';
import { LEASE_LUA } from './lease-script.js';
import { PlanCache, refusedAdmission, type Admission, type AdmitInput, type EdgeLimiter, type PlanEntry } from './limiter.js';
import { scriptSha } from './script.js';
import { classifyRefusal, DIM_MESSAGES, DIM_REQUESTS, monthWindow, type LimitCost, type LimitPlan } from './verdict.js';

const LEASE_SHA = scriptSha(LEASE_LUA);
const NOTHING: LeaseWants = { requests: 0, messages: 0, bytes: 0 };
/** Lease calls one request may make or join before the exact admit decides it. */
const MAX_CALLS_PER_ADMIT = 3;

type LeaseReply = [number, number, string, string, number, string, number, number];

/** One tenant's slices on this instance. */
interface Lease {
  /** The tenant object the slices were taken for (a directory change makes a new one). */
  tenant: Tenant;
  entry: PlanEntry;
  /** Unspent units of the current slices. */
  requests: number;
  messages: number;
  monthMessages: number;
  monthBytes: number;
  /** After this, unspent units may not be spent: they go back with the next call. */
  expiresAt: number;
  /** End of the month the month slices count against (they are dropped, not given back, after it). */
  monthEndMs: number;
  /** No lease call before these while that bucket's slice is spent: it could not give a full slice earlier. */
  requestsReadyAt: number;
  messagesReadyAt: number;
  /** The last call's month slices were refused (a quota near its end; then none is held): pushes take the exact admit until the lease ends. */
  monthExact: boolean;
  /** The request bucket after the last grant, for the RateLimit field. */
  bucketRemaining: number;
  bucketFullAt: number;
  traffic: LeaseTraffic;
  /** The lease call in flight, shared by the requests that wait for it. */
  inflight: Promise<boolean> | null;
}

/** Leased admits in front of the exact limiter (see the file comment). */
export class LeasedLimiter implements EdgeLimiter {
  readonly #exact: EdgeLimiter;
  readonly #redis: Redis | Cluster;
  readonly #prefix: string;
  readonly #settings: LeaseSettings;
  readonly #clock: () => number;
  readonly #plans = new PlanCache();
  readonly #leases = new Map<string, Lease>();
  /** Give-backs of replaced leases, awaited by close() so none runs after Redis is closed. */
  readonly #returning = new Set<Promise<void>>();
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
    if (this.#exact.mode() !== 'redis') return this.#exact.admit(input);
    const entry = this.#plans.get(input.tenant, 1);
    const now = this.#clock();
    let lease = this.#leases.get(input.tenant.id);
    if (lease && lease.tenant !== input.tenant) lease = this.#replaced(lease, input.tenant, entry);
    if (!lease) {
      lease = newLease(input.tenant, entry, input);
      this.#leases.set(input.tenant.id, lease);
    } else observeTraffic(lease.traffic, input);
    if (!leasable(entry.plan, input)) return this.#exactWithoutHeld(lease, input);
    const taken = take(lease, input, now);
    if (taken) return taken;
    // The exact path's deny cache knows a dimension is spent: no lease call can help before then.
    const cached = this.#exact.denied(input);
    if (cached) return cached;
    // The slices are being exchanged: what this instance held comes back with the call.
    if (lease.inflight) return this.#renewThenTake(lease, input);
    if (blockedUntil(lease, input, now) > now) return refusal(lease, input, now);
    // A quota too near its end to slice: the lease holds no month units (they are granted together or not at all).
    if (now < lease.expiresAt && monthShortOnly(lease, input)) return this.#exact.admit(input);
    return this.#renewThenTake(lease, input);
  }

  mode(): string {
    return this.#exact.mode();
  }

  liveInstances(): number {
    return this.#exact.liveInstances();
  }

  denied(input: AdmitInput): Admission | null {
    return this.#exact.denied(input);
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
    await Promise.all(this.#returning);
    this.#leases.clear();
    await this.#exact.close();
  }

  /** A tenant whose record changed: the slices stay if its limits did, else they go back (priced at the old plan). */
  #replaced(lease: Lease, tenant: Tenant, entry: PlanEntry): Lease | undefined {
    if (samePlan(lease.entry.plan, entry.plan)) {
      lease.tenant = tenant;
      lease.entry = entry;
      return lease;
    }
    this.#leases.delete(tenant.id);
    const returned = (lease.inflight ?? Promise.resolve(true)).then(() => this.#giveBack(lease));
    this.#returning.add(returned);
    void returned.finally(() => this.#returning.delete(returned));
    return undefined;
  }

  async #renewThenTake(lease: Lease, input: AdmitInput): Promise<Admission> {
    // A request that joined another request's call may find its slices spent or sized for that
    // one: it makes a call of its own (shared by whoever waits then), up to a few times.
    for (let calls = 0; calls < MAX_CALLS_PER_ADMIT; calls++) {
      const own = lease.inflight === null;
      lease.inflight ??= this.#call(lease, leaseWants(lease.entry.plan, this.#exact.liveInstances(), this.#settings, lease.traffic, input)).finally(() => {
        lease.inflight = null;
      });
      if (!(await lease.inflight)) return this.#exact.admit(input);
      const now = this.#clock();
      const taken = take(lease, input, now);
      if (taken) return taken;
      if (blockedUntil(lease, input, now) > now) return refusal(lease, input, now);
      if (own || lease.monthExact) break;
    }
    // A quota too near its end to slice: the exact admit decides.
    return this.#exactWithoutHeld(lease, input);
  }

  /**
   * The exact admit, after giving back what this instance holds of the month quotas: the exact
   * admit counts held slices as used, so its own would refuse a push that fits.
   */
  async #exactWithoutHeld(lease: Lease, input: AdmitInput): Promise<Admission> {
    if ((input.messages > 0 && lease.monthMessages > 0) || (input.ingressBytes > 0 && lease.monthBytes > 0)) {
      await lease.inflight;
      await this.#giveBack(lease);
    }
    return this.#exact.admit(input);
  }

  /** Gives back the unspent slices and takes `wanted` in one call; false when Redis did not answer. */
  async #call(lease: Lease, wanted: LeaseWants): Promise<boolean> {
    const now = this.#clock();
    const instances = this.#exact.liveInstances();
    let reply: LeaseReply;
    try {
      reply = await this.#exchange(lease, now, instances, wanted);
    } catch {
      return false;
    }
    const plan = lease.entry.plan;
    const month = monthWindow(now);
    lease.requests = reply[0];
    lease.messages = reply[4];
    lease.monthMessages = reply[6];
    lease.monthBytes = reply[7];
    lease.monthEndMs = month.endMs;
    lease.expiresAt = Math.min(now + this.#settings.durationMs, month.endMs);
    lease.requestsReadyAt = now + callAgainAfterMs(reply[0], wanted.requests, Number(reply[3]), instances, plan.requestIntervalMs);
    lease.messagesReadyAt = now + callAgainAfterMs(reply[4], wanted.messages, Number(reply[5]), instances, plan.messageIntervalMs);
    lease.monthExact = reply[6] < wanted.messages || reply[7] < wanted.bytes;
    lease.bucketRemaining = reply[1];
    lease.bucketFullAt = now + Number(reply[2]);
    return true;
  }

  /** Returns the unspent slices without taking any; a failure leaves them lost (under-admission, never double spending). */
  async #giveBack(lease: Lease): Promise<void> {
    if (lease.requests + lease.messages + lease.monthMessages + lease.monthBytes === 0) return;
    await this.#exchange(lease, this.#clock(), this.#exact.liveInstances(), NOTHING).catch(() => {});
  }

  /** One LEASE_LUA call: the lease's unspent units go back (its month slices only within their month), and are zeroed here first. */
  #exchange(lease: Lease, now: number, instances: number, wanted: LeaseWants): Promise<LeaseReply> {
    const plan = lease.entry.plan;
    const month = monthWindow(now);
    const sameMonth = lease.monthEndMs === month.endMs;
    const back = { requests: lease.requests, messages: lease.messages, monthMessages: sameMonth ? lease.monthMessages : 0, monthBytes: sameMonth ? lease.monthBytes : 0 };
    lease.requests = lease.messages = lease.monthMessages = lease.monthBytes = 0;
    const k = limiterKeys(this.#prefix, lease.tenant.id, month.id);
    const args = [
      now, instances, monthKeyTtlMs(month.endMs, now),
      plan.requestIntervalMs, plan.requestBurst, back.requests, wanted.requests,
      plan.messageIntervalMs, plan.messageBurst, back.messages, wanted.messages,
      plan.messagesPerMonth, back.monthMessages, wanted.messages,
      plan.ingressBytesPerMonth, back.monthBytes, wanted.bytes,
    ];
    return evalScript(this.#redis, LEASE_SHA, LEASE_LUA, [k.requests, k.messages, k.monthMessages, k.monthBytes], args) as Promise<LeaseReply>;
  }

  /** Returns the expired slices of tenants that went quiet, and forgets idle leases. */
  #sweep(): void {
    const now = this.#clock();
    for (const [id, lease] of this.#leases) {
      if (lease.inflight || now < lease.expiresAt) continue;
      if (lease.requests + lease.messages + lease.monthMessages + lease.monthBytes > 0) void this.#giveBack(lease);
      else if (now >= lease.requestsReadyAt && now >= lease.messagesReadyAt) this.#leases.delete(id);
    }
  }
}

/** A lease with no slices yet; its traffic averages start at its first request's. */
function newLease(tenant: Tenant, entry: PlanEntry, first: LimitCost): Lease {
  return {
    tenant, entry, requests: 0, messages: 0, monthMessages: 0, monthBytes: 0, expiresAt: 0, monthEndMs: 0,
    requestsReadyAt: 0, messagesReadyAt: 0, monthExact: false, bucketRemaining: 0, bucketFullAt: 0,
    traffic: { messagesPerRequest: first.messages, bytesPerRequest: first.ingressBytes }, inflight: null,
  };
}

function samePlan(a: LimitPlan, b: LimitPlan): boolean {
  return a.requestIntervalMs === b.requestIntervalMs && a.requestBurst === b.requestBurst && a.messageIntervalMs === b.messageIntervalMs &&
    a.messageBurst === b.messageBurst && a.messagesPerMonth === b.messagesPerMonth && a.ingressBytesPerMonth === b.ingressBytesPerMonth;
}

/** Spends one request's units of live slices, or null when a slice is short or ended. */
function take(lease: Lease, cost: LimitCost, now: number): Admission | null {
  if (now >= lease.expiresAt || lease.requests === 0 || lease.messages < cost.messages || lease.monthMessages < cost.messages || lease.monthBytes < cost.ingressBytes) return null;
  lease.requests--;
  lease.messages -= cost.messages;
  lease.monthMessages -= cost.messages;
  lease.monthBytes -= cost.ingressBytes;
  // Approximate: the bucket as of the last grant, plus what this instance still holds.
  const headers = rateLimitHeaders(lease.entry.policy, lease.bucketRemaining + lease.requests, Math.max(0, lease.bucketFullAt - now));
  return { refusal: null, headers, release: null };
}

/** When a bucket this request is short of could give a slice again (≤ now: a call may be made now). */
function blockedUntil(lease: Lease, cost: LimitCost, now: number): number {
  let until = now;
  if (lease.requests === 0) until = Math.max(until, lease.requestsReadyAt);
  if (lease.messages < cost.messages) until = Math.max(until, lease.messagesReadyAt);
  return until;
}

/** The buckets' slices cover the request; only the month slices, refused near a quota's end, do not. */
function monthShortOnly(lease: Lease, cost: LimitCost): boolean {
  return lease.monthExact && lease.requests > 0 && lease.messages >= cost.messages;
}

/** A refusal until the short bucket could give a slice again; it takes nothing. */
function refusal(lease: Lease, cost: LimitCost, now: number): Admission {
  const plan = lease.entry.plan;
  const requestShort = lease.requests === 0 && lease.requestsReadyAt > now;
  const messageShort = lease.messages < cost.messages && lease.messagesReadyAt > now;
  const requestWaitMs = requestShort ? Math.max(lease.requestsReadyAt - now, plan.requestIntervalMs) : 0;
  const messageWaitMs = messageShort ? Math.max(lease.messagesReadyAt - now, cost.messages * plan.messageIntervalMs) : 0;
  const cls = classifyRefusal((requestShort ? DIM_REQUESTS : 0) | (messageShort ? DIM_MESSAGES : 0), requestWaitMs, messageWaitMs, now, 0);
  return refusedAdmission(cls, rateLimitHeaders(lease.entry.policy, lease.requests === 0 ? 0 : lease.bucketRemaining + lease.requests, Math.max(0, lease.bucketFullAt - now)));
}
