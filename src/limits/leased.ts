/**
 * `limits.mode: leased` (docs/limits.md, "Leased mode"): each instance takes slices of a tenant's
 * shared limits from Redis in one script call (LEASE_LUA) and admits requests locally from them,
 * so a steady stream costs one round trip per slice instead of one per request. Four dimensions
 * are leased: the request bucket, the message bucket, and the month's message and byte quotas.
 * Slices are taken from the shared state before they are spent, so a bucket is never overdrawn
 * and a quota is exceeded only by the bounded cases of lease-script.ts (units spent but not yet
 * reported when a holding is released); what an instance holds unspent (at most sliceFraction × burst of a
 * bucket over all instances) is the bound by which a window can see more than the exact limiter
 * would admit. Unspent slices go back when the lease ends: with the next call, or from the sweep
 * for tenants that went quiet.
 *
 * The exact admit (one round trip, every dimension atomically) still decides parked polls (their
 * slot is a live count, not a rate), pushes larger than the message burst (only it lets them
 * through as debt), pushes while a quota is too near its end to be sliced, and every request while
 * the exact limiter is not on Redis (its fail mode decides). A lease call that fails hands the
 * request to the exact admit too, so failMode semantics stay those of the exact limiter.
 *
 * Before a call the instance zeroes its local units (it spends nothing while the call is in
 * flight), so a failed call never lets a unit be spent twice. Bucket units of a failed call are
 * lost and refill. Month units are not: each call carries this instance's id, a sequence number
 * and the month units it has spent this month in all (absolute, not what it gives back), and
 * Redis keeps what each instance holds (lease-script.ts). The next call that gets through, or the
 * sweep's retry, settles whatever a failed one left, granted or not; a stale or replayed call
 * changes nothing; and the holdings of an instance that stopped calling are released by the
 * others once its own lease has ended plus its own margin, and Redis has been answering for that
 * margin (after an outage, every instance first gets the time to report). Redis keeps one record
 * per instance and tenant, so one Lease object per tenant makes the calls, one at a time (`inflight`).
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
/** Stall allowance in the default reclaim margin (see LeasedOptions). */
const RECLAIM_SLACK_MS = 5_000;
/** A holdings record idle this long (or twice the reclaim age, if longer) is deleted; a replay older than that is no longer recognised as stale. */
const FORGET_AFTER_MS = 3_600_000;
/** A failed give-back is tried again this soon (at most durationMs), not only at the next sweep: it races the others' reclaim. */
const RETRY_MS = 250;

type LeaseReply = [number, number, string, string, number, string, number, number, number];

/** Optional knobs of LeasedLimiter. */
export interface LeasedOptions {
  /**
   * How long after an instance's lease has ended the others release the month units it still
   * holds, when it has not called again; stored in its own record, so only its own setting
   * counts. Default: durationMs (the sweep's period, so an idle live instance has reported by
   * then) + 5 s (a stalled event loop). After a pause in the tenant's lease calls longer than
   * durationMs + 5 s (possibly an outage), Redis must answer for this margin again before.
   */
  readonly reclaimMarginMs?: number;
}

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
  /** Month units this instance spent of its slices in `spentMonth` (yyyymm), reported in every call. */
  spentMonth: string;
  spentMessages: number;
  spentBytes: number;
  /** Redis may count month units for this lease that no answered call settled: spent since, or held by a call that failed. */
  unsettled: boolean;
  /** Replaced or forgotten: it makes no more calls (Redis keeps one record per instance and tenant, now another lease's). */
  retired: boolean;
  /** No lease call before these while that bucket's slice is spent: it could not give a full slice earlier. */
  requestsReadyAt: number;
  messagesReadyAt: number;
  /** The last call's month slices were refused (a quota near its end; then none is held): pushes take the exact admit until the lease ends. */
  monthExact: boolean;
  /** The request bucket after the last grant, for the RateLimit field. */
  bucketRemaining: number;
  bucketFullAt: number;
  traffic: LeaseTraffic;
  /** The lease call in flight (one at a time), shared by the requests that wait for it. */
  inflight: Promise<boolean> | null;
}

/** Leased admits in front of the exact limiter (see the file comment). */
export class LeasedLimiter implements EdgeLimiter {
  readonly #exact: EdgeLimiter;
  readonly #redis: Redis | Cluster;
  readonly #prefix: string;
  readonly #settings: LeaseSettings;
  readonly #clock: () => number;
  readonly #reclaimMarginMs: number;
  readonly #forgetAfterMs: number;
  readonly #gapMs: number;
  readonly #plans = new PlanCache();
  readonly #leases = new Map<string, Lease>();
  /** Sequence number of the last lease call: increasing per instance, so per instance and tenant too. */
  #seq = 0;
  #timer: NodeJS.Timeout | null = null;
  #retryTimer: NodeJS.Timeout | null = null;

  constructor(
    exact: EdgeLimiter,
    redis: Redis | Cluster,
    prefix: string,
    settings: LeaseSettings,
    clock: () => number = Date.now,
    options: LeasedOptions = {},
  ) {
    this.#exact = exact;
    this.#redis = redis;
    this.#prefix = prefix;
    this.#settings = settings;
    this.#clock = clock;
    this.#reclaimMarginMs = options.reclaimMarginMs ?? settings.durationMs + RECLAIM_SLACK_MS;
    this.#forgetAfterMs = Math.max(FORGET_AFTER_MS, 2 * (settings.durationMs + this.#reclaimMarginMs));
    // Longer than the pauses of a busy tenant's calls (about one lease), so only a real pause restarts Redis's "up since".
    this.#gapMs = settings.durationMs + RECLAIM_SLACK_MS;
  }

  /**
   * Before the body: the exact path's deny cache, then what this instance's lease knows. A request
   * the lease would refuse without a call (its request slice spent, the bucket unable to give one
   * yet) is refused from its head too, so a throttled tenant's uploads are not read only to be
   * refused. Parked polls are left to the exact admit, which can still take a token the lease could not.
   */
  preAdmit(input: AdmitInput): Admission | null {
    const pre = this.#exact.preAdmit(input);
    if (pre?.refusal || input.parkedPoll || this.#exact.mode() !== 'redis') return pre;
    const lease = this.#leases.get(input.tenant.id);
    if (!lease || lease.tenant !== input.tenant || lease.inflight) return pre;
    const now = this.#clock();
    if (lease.requests > 0 || lease.requestsReadyAt <= now) return pre;
    pre?.release?.();
    return refusal(lease, input, now);
  }

  admit(input: AdmitInput): Admission | Promise<Admission> {
    if (this.#exact.mode() !== 'redis') return this.#exact.admit(input);
    const entry = this.#plans.get(input.tenant, 1);
    const now = this.#clock();
    let lease = this.#leases.get(input.tenant.id);
    if (lease && lease.tenant !== input.tenant) lease = this.#replaced(lease, input.tenant, entry, input);
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

  instanceId(): string {
    return this.#exact.instanceId();
  }

  async start(): Promise<void> {
    await this.#exact.start();
    this.#timer = setInterval(() => this.#sweep(), this.#settings.durationMs);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    if (this.#retryTimer) clearTimeout(this.#retryTimer);
    this.#timer = this.#retryTimer = null;
    // A replaced lease's give-back is part of its successor's call in flight, so this waits for it too.
    await Promise.all([...this.#leases.values()].map((l) => this.#giveBack(l)));
    this.#leases.clear();
    await this.#exact.close();
  }

  /**
   * A tenant whose record changed: the slices stay if its limits did, else they go back (priced at
   * the old plan). The new lease makes no call before that give-back is answered or failed, and
   * carries on its month totals: Redis holds one record per instance and tenant, and a call of
   * either would release what the other holds.
   */
  #replaced(lease: Lease, tenant: Tenant, entry: PlanEntry, first: LimitCost): Lease {
    if (samePlan(lease.entry.plan, entry.plan)) {
      lease.tenant = tenant;
      lease.entry = entry;
      return lease;
    }
    const next = newLease(tenant, entry, first);
    next.inflight = this.#settle(lease)
      .then(() => {
        next.spentMonth = lease.spentMonth;
        next.spentMessages = lease.spentMessages;
        next.spentBytes = lease.spentBytes;
        next.unsettled = lease.unsettled;
        return true;
      })
      .finally(() => {
        next.inflight = null;
      });
    lease.retired = true;
    this.#leases.set(tenant.id, next);
    return next;
  }

  async #renewThenTake(lease: Lease, input: AdmitInput): Promise<Admission> {
    // A request that joined another request's call may find its slices spent or sized for that
    // one: it makes a call of its own (shared by whoever waits then), up to a few times.
    for (let calls = 0; calls < MAX_CALLS_PER_ADMIT; calls++) {
      if (lease.retired) return this.#exact.admit(input);
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
    // A failed call may have left a slice held: unsettled gives that back too.
    if ((input.messages > 0 || input.ingressBytes > 0) && (lease.monthMessages > 0 || lease.monthBytes > 0 || lease.unsettled)) {
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
    // Month slices are spent only in their month (their units count in spentMonth).
    lease.expiresAt = Math.min(now + this.#settings.durationMs, month.endMs);
    lease.requestsReadyAt = now + callAgainAfterMs(reply[0], wanted.requests, Number(reply[3]), instances, plan.requestIntervalMs);
    lease.messagesReadyAt = now + callAgainAfterMs(reply[4], wanted.messages, Number(reply[5]), instances, plan.messageIntervalMs);
    lease.monthExact = reply[6] < wanted.messages || reply[7] < wanted.bytes;
    lease.bucketRemaining = reply[1];
    lease.bucketFullAt = now + Number(reply[2]);
    return true;
  }

  /** Returns the unspent slices without taking any, and settles the month holdings; a failure keeps the lease unsettled, for the next call or the sweep. */
  async #giveBack(lease: Lease): Promise<void> {
    if (!lease.retired) await this.#settle(lease);
  }

  /** The give-back call, after the call in flight; nothing when the lease holds nothing and Redis holds nothing for it. */
  async #settle(lease: Lease): Promise<void> {
    while (lease.inflight) await lease.inflight;
    if (lease.requests + lease.messages + lease.monthMessages + lease.monthBytes === 0 && !lease.unsettled) return;
    const call = this.#exchange(lease, this.#clock(), this.#exact.liveInstances(), NOTHING)
      .then(
        () => true,
        () => false,
      )
      .finally(() => {
        lease.inflight = null;
      });
    lease.inflight = call;
    await call;
  }

  /**
   * One LEASE_LUA call. The bucket units this lease holds go back by number (lost if the call
   * fails: a bucket refills); its month units are zeroed and settled by the spent totals instead
   * (see the file comment). `unsettled` stays set until Redis answers.
   */
  async #exchange(lease: Lease, now: number, instances: number, wanted: LeaseWants): Promise<LeaseReply> {
    const plan = lease.entry.plan;
    const month = monthWindow(now);
    if (lease.spentMonth !== month.id) {
      // A new month's record starts from nothing; the last month's holdings expire with its counter.
      lease.spentMonth = month.id;
      lease.spentMessages = lease.spentBytes = 0;
      lease.unsettled = false;
    }
    const back = { requests: lease.requests, messages: lease.messages };
    lease.unsettled ||= lease.monthMessages > 0 || lease.monthBytes > 0 || wanted.messages > 0 || wanted.bytes > 0;
    lease.requests = lease.messages = lease.monthMessages = lease.monthBytes = 0;
    const k = limiterKeys(this.#prefix, lease.tenant.id, month.id);
    const args = [
      now,
      instances,
      monthKeyTtlMs(month.endMs, now),
      plan.requestIntervalMs,
      plan.requestBurst,
      back.requests,
      wanted.requests,
      plan.messageIntervalMs,
      plan.messageBurst,
      back.messages,
      wanted.messages,
      plan.messagesPerMonth,
      lease.spentMessages,
      wanted.messages,
      plan.ingressBytesPerMonth,
      lease.spentBytes,
      wanted.bytes,
      this.#exact.instanceId(),
      ++this.#seq,
      this.#settings.durationMs,
      this.#reclaimMarginMs,
      this.#forgetAfterMs,
      this.#gapMs,
    ];
    const reply = (await evalScript(
      this.#redis,
      LEASE_SHA,
      LEASE_LUA,
      [k.requests, k.messages, k.monthMessages, k.monthBytes, k.monthHoldings],
      args,
    )) as LeaseReply;
    // Stale (a newer call of this instance was applied first): it settled nothing and granted nothing.
    if (Number(reply[8]) !== 1) throw new Error('stale lease call');
    // Nothing is spent while a call is in flight, so this answer settled everything up to now.
    lease.unsettled = false;
    return reply;
  }

  /** Returns the expired slices of tenants that went quiet, reports what they spent, and forgets idle leases. */
  #sweep(): void {
    const now = this.#clock();
    for (const [id, lease] of this.#leases) {
      if (lease.inflight || now < lease.expiresAt) continue;
      // Reported before this instance's reclaim margin runs out, which would release spent units.
      if (lease.requests + lease.messages + lease.monthMessages + lease.monthBytes > 0 || lease.unsettled) {
        void this.#giveBack(lease).then(() => {
          if (lease.unsettled && !lease.retired) this.#retrySoon();
        });
      } else if (now >= lease.requestsReadyAt && now >= lease.messagesReadyAt) {
        lease.retired = true;
        this.#leases.delete(id);
      }
    }
  }

  /** One more sweep soon after a failed give-back (one timer for all tenants). */
  #retrySoon(): void {
    // While the breaker keeps Redis out, the next sweep tries again: no retries against a Redis that fails them at once.
    if (this.#retryTimer || !this.#timer || this.#exact.mode() !== 'redis') return;
    this.#retryTimer = setTimeout(
      () => {
        this.#retryTimer = null;
        this.#sweep();
      },
      Math.min(RETRY_MS, this.#settings.durationMs),
    );
    this.#retryTimer.unref();
  }
}

/** A lease with no slices yet; its traffic averages start at its first request's. */
function newLease(tenant: Tenant, entry: PlanEntry, first: LimitCost): Lease {
  return {
    tenant,
    entry,
    requests: 0,
    messages: 0,
    monthMessages: 0,
    monthBytes: 0,
    expiresAt: 0,
    spentMonth: '',
    spentMessages: 0,
    spentBytes: 0,
    unsettled: false,
    retired: false,
    requestsReadyAt: 0,
    messagesReadyAt: 0,
    monthExact: false,
    bucketRemaining: 0,
    bucketFullAt: 0,
    traffic: { messagesPerRequest: first.messages, bytesPerRequest: first.ingressBytes },
    inflight: null,
  };
}

function samePlan(a: LimitPlan, b: LimitPlan): boolean {
  return (
    a.requestIntervalMs === b.requestIntervalMs &&
    a.requestBurst === b.requestBurst &&
    a.messageIntervalMs === b.messageIntervalMs &&
    a.messageBurst === b.messageBurst &&
    a.messagesPerMonth === b.messagesPerMonth &&
    a.ingressBytesPerMonth === b.ingressBytesPerMonth
  );
}

/** Spends one request's units of live slices, or null when a slice is short or ended. */
function take(lease: Lease, cost: LimitCost, now: number): Admission | null {
  if (
    now >= lease.expiresAt ||
    lease.requests === 0 ||
    lease.messages < cost.messages ||
    lease.monthMessages < cost.messages ||
    lease.monthBytes < cost.ingressBytes
  )
    return null;
  lease.requests--;
  lease.messages -= cost.messages;
  lease.monthMessages -= cost.messages;
  lease.monthBytes -= cost.ingressBytes;
  if (cost.messages > 0 || cost.ingressBytes > 0) {
    lease.spentMessages += cost.messages;
    lease.spentBytes += cost.ingressBytes;
    lease.unsettled = true;
  }
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
  return refusedAdmission(
    cls,
    rateLimitHeaders(lease.entry.policy, lease.requests === 0 ? 0 : lease.bucketRemaining + lease.requests, Math.max(0, lease.bucketFullAt - now)),
  );
}
