/**
 * The limiter the pipeline calls (docs/limits.md): request rate, message rate, parked
 * polls and monthly quotas per tenant, decided in one step. Two implementations behind one
 * interface: memory (no Redis configured) and Redis (one EVALSHA per admit, a local deny cache,
 * and a circuit breaker whose fail mode decides while Redis is away). For `limits.mode: leased`,
 * leased.ts wraps the Redis one and admits most requests from local slices.
 *
 * Why not rate-limiter-flexible: its limiters hold one key and one algorithm each, so checking
 * four dimensions atomically would take four round trips and could not undo the ones that
 * passed when another refused. The custom script (script.ts) takes all or nothing in one trip.
 *
 * Parked polls: each wait=true pop takes a slot, a unique id in a ZSET scored by its expiry
 * (now + parkedSlotTtlMs). release() removes it; a release that failed is sent again after the
 * next successful heartbeat, and a slot whose release was lost for good (crash) stops counting
 * at its expiry, so leaks cannot lock a tenant out for long. The TTL must exceed the
 * longest park: pass longPoll.maxTimeoutMs + 2 × slackMs (the upstream timeout plus slack).
 *
 * A script error (Redis answered, the script failed: e.g. a plan value the script cannot handle) is
 * that request's error, decided by the fail mode for that request alone (`closed`: 503, `open`:
 * admitted, `local`: the local store); it never opens the breaker, so other tenants keep the
 * shared limits. Only a Redis that does not answer (timeout, connection lost, LOADING, BUSY...)
 * trips it.
 *
 * Quotas of 0 mean unlimited (a plan with no monthly cap; suspension is the way to stop a tenant).
 */
import { randomUUID } from 'node:crypto';
import { ReplyError, type Cluster, type Redis } from 'ioredis';
import type { RawConfig } from '../config/schema.js';
import { edgeError, type EdgeError } from '../errors.js';
import type { Logger } from '../observability/log.js';
import type { Tenant } from '../tenants/model.js';
import { Breaker } from './breaker.js';
import { DenyCache, type CachedDenial } from './deny-cache.js';
import { rateLimitHeaders, rateLimitPolicy } from './headers.js';
import { MemoryLimitStore } from './memory-store.js';
import type { RedisClient } from '../redis/connection.js';
import { RedisLimitStore } from './redis-store.js';
import { classifyRefusal, compileLimitPlan, monthWindow, type Decision, type LimitPlan, type RefusalClass } from './verdict.js';

/** One request as the limiter sees it. */
export interface AdmitInput {
  readonly tenant: Tenant;
  /** push: items.length; transaction: pushed items; else 0. */
  readonly messages: number;
  /** Request body bytes (content-length or measured). */
  readonly ingressBytes: number;
  /** A wait=true pop: takes a parked-poll slot. */
  readonly parkedPoll: boolean;
}

/** The limiter's answer for one request. */
export interface Admission {
  /** null = admitted. */
  readonly refusal: EdgeError | null;
  /** RateLimit-Policy / RateLimit to set on the response (admitted and refused); null in failMode open/closed. */
  readonly headers: Readonly<Record<string, string>> | null;
  /** Parked polls: gives the slot back; idempotent; never throws. */
  readonly release: (() => void) | null;
}

/** What the request path's preAdmit and admit stages call (src/pipeline/stages.ts). */
export interface Limiter {
  /**
   * Before the body is read (docs/limits.md, "Admit before the body"): a refusal this instance
   * already knows — a deny-cache entry for the request rate or a spent quota — or null to read the
   * body and admit(). Local and synchronous: `messages` is 0 and `ingressBytes` the declared length
   * (0 when unknown); it counts nothing in the shared limits. For a tenant whose request rate the
   * store refused, the head is counted in flight (DenyCache.head): the answer is then an admitted
   * Admission whose `release` the caller must call once admit() decided, or the request ended
   * without it.
   */
  preAdmit(input: AdmitInput): Admission | null;
  /** Sync where no I/O is needed (memory store, local deny cache, breaker open). */
  admit(input: AdmitInput): Admission | Promise<Admission>;
  /** 'redis' | 'memory' | or the failMode in force while Redis is unavailable: 'open' | 'closed' | 'local' */
  mode(): string;
  start(): Promise<void>;
  close(): Promise<void>;
}

/** A Limiter that also reports the live instance count it divides by in failMode local. */
export interface EdgeLimiter extends Limiter {
  /** Instances seen by the last successful heartbeat (1 before any, and for memory). */
  liveInstances(): number;
  /** A refusal the deny cache holds for this cost now, like preAdmit but taking nothing: for a request past its body. */
  denied(input: AdmitInput): Admission | null;
  /** This process's id, as its heartbeat and parked slots name it (leased mode keys its month holdings by it). */
  instanceId(): string;
}

/** Optional knobs; defaults suit production. */
export interface LimiterDeps {
  readonly log: Logger;
  readonly clock?: () => number;
  /** The caller's client (not closed by close()); without one the limits are in memory. */
  readonly redis?: Redis | Cluster;
  /** Parked slot lifetime; default 70 s (60 s max long poll + 2 × 5 s slack). */
  readonly parkedSlotTtlMs?: number;
  /** Heartbeat period; instances unseen for 3 periods are not live. Default 1000. */
  readonly heartbeatMs?: number;
  /** How long a spent quota is refused from the deny cache; default the rest of the month (see DenyCache). */
  readonly quotaDenialMs?: number;
}

const DEFAULT_SLOT_TTL_MS = 70_000;
/** Breaker cool-down before the half-open probe. */
const BREAKER_OPEN_MS = 1000;
const ADMITTED_BARE: Admission = Object.freeze({ refusal: null, headers: null, release: null });

/** A compiled plan and its fixed RateLimit-Policy string, per tenant object and divisor. */
export interface PlanEntry {
  readonly divisor: number;
  readonly plan: LimitPlan;
  readonly policy: string;
}

/** Compiles plan entries once per Tenant object (a directory change makes a new one). */
export class PlanCache {
  readonly #entries = new WeakMap<Tenant, PlanEntry>();

  get(tenant: Tenant, divisor: number): PlanEntry {
    const e = this.#entries.get(tenant);
    if (e?.divisor === divisor) return e;
    const plan = compileLimitPlan(tenant.limits, tenant.plan.quotas, divisor);
    const fresh = { divisor, plan, policy: rateLimitPolicy(plan) };
    this.#entries.set(tenant, fresh);
    return fresh;
  }
}

export function refusedAdmission(cls: RefusalClass, headers: Readonly<Record<string, string>>): Admission {
  // The refusal carries the same headers, so renderError(refusal) alone writes a complete 429.
  return { refusal: edgeError(cls.code, undefined, { retryAfterSec: cls.retryAfterSec, headers: { ...headers } }), headers, release: null };
}

/** A refusal the deny cache already holds for this cost, or null. */
function cachedRefusal(deny: DenyCache, plans: PlanCache, input: AdmitInput, now: number): Admission | null {
  const denied = deny.check(input.tenant, input, now);
  return denied ? cachedAdmission(denied, plans, input) : null;
}

function cachedAdmission(denied: CachedDenial, plans: PlanCache, input: AdmitInput): Admission {
  return refusedAdmission(denied, rateLimitHeaders(plans.get(input.tenant, 1).policy, denied.remaining, denied.resetMs));
}

/** preAdmit from the deny cache: its refusals, then the count of heads in flight (DenyCache.head) when `heads`. */
function headAdmission(deny: DenyCache, plans: PlanCache, input: AdmitInput, now: number, heads: boolean): Admission | null {
  const cached = cachedRefusal(deny, plans, input, now);
  if (cached || !heads) return cached;
  const head = deny.head(input.tenant, now);
  if (head === null) return null;
  return typeof head === 'function' ? { refusal: null, headers: null, release: head } : cachedAdmission(head, plans, input);
}

/** Turns a store decision into an Admission; `release` is attached only to admitted parked polls. */
function toAdmission(d: Decision, entry: PlanEntry, now: number, monthEndMs: number, release: (() => void) | null): Admission {
  const headers = rateLimitHeaders(entry.policy, d.remaining, d.resetMs);
  if (d.refused !== 0) return refusedAdmission(classifyRefusal(d.refused, d.requestWaitMs, d.messageWaitMs, now, monthEndMs), headers);
  return { refusal: null, headers, release };
}

/** An idempotent, non-throwing release for one slot. */
function releaser(store: { release(tenantId: string, slot: string): void }, tenantId: string, slot: string): () => void {
  let done = false;
  return () => {
    if (done) return;
    done = true;
    try {
      store.release(tenantId, slot);
    } catch {
      // A lost release only keeps the slot until it expires by score.
    }
  };
}

/** Unique parked-slot ids: instance id plus a counter. */
class SlotIds {
  readonly #prefix = `${randomUUID()}:`;
  #n = 0;
  next(): string {
    return this.#prefix + (++this.#n).toString(36);
  }
  /** This instance's id (the slot prefix without the colon). */
  get instanceId(): string {
    return this.#prefix.slice(0, -1);
  }
}

/** One instance, no Redis: every decision in memory, synchronously. */
class MemoryLimiter implements EdgeLimiter {
  readonly #store = new MemoryLimitStore();
  readonly #plans = new PlanCache();
  /** Only for preAdmit: admit() always asks the (local, exact) store. */
  readonly #deny = new DenyCache();
  readonly #slots = new SlotIds();
  readonly #clock: () => number;
  readonly #slotTtlMs: number;

  constructor(clock: () => number, slotTtlMs: number) {
    this.#clock = clock;
    this.#slotTtlMs = slotTtlMs;
  }

  preAdmit(input: AdmitInput): Admission | null {
    return headAdmission(this.#deny, this.#plans, input, this.#clock(), true);
  }

  denied(input: AdmitInput): Admission | null {
    return cachedRefusal(this.#deny, this.#plans, input, this.#clock());
  }

  admit(input: AdmitInput): Admission {
    return admitLocally(this.#store, this.#plans.get(input.tenant, 1), input, this.#clock(), this.#slots, this.#slotTtlMs, this.#deny);
  }

  mode(): string {
    return 'memory';
  }

  liveInstances(): number {
    return 1;
  }

  instanceId(): string {
    return this.#slots.instanceId;
  }

  async start(): Promise<void> {}

  async close(): Promise<void> {}
}

function admitLocally(
  store: MemoryLimitStore,
  entry: PlanEntry,
  input: AdmitInput,
  now: number,
  slots: SlotIds,
  slotTtlMs: number,
  deny: DenyCache | null,
): Admission {
  const month = monthWindow(now);
  const slot = input.parkedPoll ? slots.next() : '';
  const d = store.admit(input.tenant.id, entry.plan, input, now, month.id, slot, slotTtlMs);
  if (d.refused !== 0) deny?.record(input.tenant, d, input, now, month.endMs, entry.plan);
  else deny?.observe(input.tenant, d, now);
  return toAdmission(d, entry, now, month.endMs, input.parkedPoll ? releaser(store, input.tenant.id, slot) : null);
}

/** Shared limits in Redis, with the deny cache, breaker and fail modes (see the file comment). */
class RedisLimiter implements EdgeLimiter {
  readonly #store: RedisLimitStore;
  readonly #deny: DenyCache;
  readonly #plans = new PlanCache();
  readonly #slots = new SlotIds();
  readonly #breaker: Breaker;
  readonly #failMode: 'open' | 'closed' | 'local';
  readonly #unavailable = edgeError('limiter_unavailable');
  readonly #log: Logger;
  readonly #clock: () => number;
  readonly #slotTtlMs: number;
  readonly #heartbeatMs: number;
  /** Tenants whose script error was logged (once per tenant object, i.e. per plan version). */
  readonly #scriptErrorsLogged = new WeakSet<Tenant>();
  #local = new MemoryLimitStore();
  #instances = 1;
  #lastMode = 'redis';
  #timer: NodeJS.Timeout | null = null;

  constructor(cfg: RawConfig['redis'], redis: RedisClient, deps: LimiterDeps) {
    this.#store = new RedisLimitStore(redis, cfg.keyPrefix, cfg.timeoutMs);
    this.#deny = new DenyCache(deps.quotaDenialMs);
    this.#failMode = cfg.failMode;
    this.#log = deps.log;
    this.#clock = deps.clock ?? Date.now;
    this.#breaker = new Breaker(BREAKER_OPEN_MS, this.#clock);
    this.#slotTtlMs = deps.parkedSlotTtlMs ?? DEFAULT_SLOT_TTL_MS;
    this.#heartbeatMs = deps.heartbeatMs ?? 1000;
  }

  preAdmit(input: AdmitInput): Admission | null {
    // While Redis is away the fail mode decides admits; heads are not held back for a bucket it cannot see.
    return headAdmission(this.#deny, this.#plans, input, this.#clock(), this.#breaker.state() === 'closed');
  }

  denied(input: AdmitInput): Admission | null {
    return cachedRefusal(this.#deny, this.#plans, input, this.#clock());
  }

  admit(input: AdmitInput): Admission | Promise<Admission> {
    const now = this.#clock();
    const cached = cachedRefusal(this.#deny, this.#plans, input, now);
    if (cached) return cached;
    if (!this.#breaker.allow()) return this.#fallback(input, now);
    return this.#viaRedis(input, now);
  }

  mode(): string {
    return this.#breaker.state() === 'closed' ? 'redis' : this.#failMode;
  }

  liveInstances(): number {
    return this.#instances;
  }

  instanceId(): string {
    return this.#slots.instanceId;
  }

  async start(): Promise<void> {
    // The caller waited for its client's first connection (waiting again only slows a boot with Redis down).
    await this.#store.preload().catch(() => {});
    await this.#heartbeat();
    this.#timer = setInterval(() => void this.#heartbeat(), this.#heartbeatMs);
    this.#timer.unref();
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.#store.leave(this.#slots.instanceId).catch(() => {});
  }

  async #viaRedis(input: AdmitInput, now: number): Promise<Admission> {
    const entry = this.#plans.get(input.tenant, 1);
    const month = monthWindow(now);
    const slot = input.parkedPoll ? this.#slots.next() : '';
    let d: Decision;
    try {
      d = await this.#store.admit(input.tenant.id, entry.plan, input, now, month, slot, this.#slotTtlMs);
    } catch (err) {
      // A failed admit may still take its slot in Redis later; the heartbeats give it back (releaseLater).
      if (input.parkedPoll) this.#store.releaseLater(input.tenant.id, slot, now + this.#slotTtlMs);
      if (isScriptError(err)) this.#scriptFailed(input.tenant, err);
      else this.#failed(err);
      return this.#fallback(input, this.#clock());
    }
    this.#succeeded();
    if (d.refused !== 0) this.#deny.record(input.tenant, d, input, now, month.endMs, entry.plan);
    else this.#deny.observe(input.tenant, d, now);
    return toAdmission(d, entry, now, month.endMs, input.parkedPoll ? releaser(this.#store, input.tenant.id, slot) : null);
  }

  /** The decision while the breaker keeps Redis out of the path. */
  #fallback(input: AdmitInput, now: number): Admission {
    switch (this.#failMode) {
      case 'open':
        return ADMITTED_BARE;
      case 'closed':
        return { refusal: this.#unavailable, headers: null, release: null };
      case 'local':
        return admitLocally(this.#local, this.#plans.get(input.tenant, this.#instances), input, now, this.#slots, this.#slotTtlMs, null);
    }
  }

  async #heartbeat(): Promise<void> {
    try {
      this.#instances = Math.max(1, await this.#store.heartbeat(this.#slots.instanceId, this.#clock(), this.#heartbeatMs * 3));
      // A working heartbeat proves Redis is back, so recovery does not wait for traffic.
      this.#succeeded();
      await this.#store.retryReleases(this.#clock());
    } catch (err) {
      this.#failed(err);
    }
  }

  #failed(err: unknown): void {
    this.#breaker.failure();
    if (this.#lastMode !== 'redis') return;
    this.#lastMode = this.#failMode;
    // Local mode starts from empty counters: whatever it held from an earlier outage is stale.
    if (this.#failMode === 'local') this.#local = new MemoryLimitStore();
    this.#log.warn({ err, failMode: this.#failMode, instances: this.#instances }, `limiter: Redis unavailable, failMode ${this.#failMode} in force`);
  }

  /** Redis answered, so it is up; the tenant's plan is what the script could not handle. */
  #scriptFailed(tenant: Tenant, err: unknown): void {
    this.#succeeded();
    if (this.#scriptErrorsLogged.has(tenant)) return;
    this.#scriptErrorsLogged.add(tenant);
    this.#log.error({ err, tenant: tenant.id, failMode: this.#failMode }, 'limiter: script error for this tenant; its requests are decided by the fail mode');
  }

  #succeeded(): void {
    this.#breaker.success();
    if (this.#lastMode === 'redis') return;
    this.#lastMode = 'redis';
    this.#log.info('limiter: Redis is back, shared limits in force');
  }
}

/** A failure inside the admit script, as opposed to Redis not answering (errors come back as `… @user_script:N`). */
function isScriptError(err: unknown): boolean {
  return err instanceof ReplyError && /user_script/.test((err as Error).message);
}

/** Builds the limiter: Redis-backed on the caller's client, else in memory (one instance). */
export function createLimiter(cfg: RawConfig['redis'], deps: LimiterDeps): EdgeLimiter {
  if (deps.redis) return new RedisLimiter(cfg, deps.redis, deps);
  return new MemoryLimiter(deps.clock ?? Date.now, deps.parkedSlotTtlMs ?? DEFAULT_SLOT_TTL_MS);
}
