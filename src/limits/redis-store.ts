/**
 * The shared limiter store: one EVALSHA per tenant per event-loop turn, deciding each of that
 * tenant's admits of the turn in order (EVAL once after a NOSCRIPT, e.g. after a Redis restart),
 * parked-slot releases as fire-and-forget ZREMs, and the instance heartbeat.
 * A release that fails (connection dropped, Redis still holding the slot) is kept and sent
 * again by retryReleases(), so a blip does not hold a tenant's slots until they expire. The slot
 * of an admit that failed is removed again at each retry until a removal finds it or it expires:
 * the admit may still run late (a Cluster client re-sends it to the promoted replica), after a
 * removal that found nothing.
 */
import calculateSlot from 'cluster-key-slot';
import { Cluster } from 'ioredis';
import type { RedisClient } from '../redis/connection.js';
import { instancesKey, limiterKeys, monthKeyTtlMs, parkedKey } from '../redis/keys.js';
import { evalScript, isNoScript } from '../redis/scripts.js';
import { ADMIT_ARGS, ADMIT_LUA, HEARTBEAT_LUA, scriptSha } from './script.js';
import type { Decision, LimitCost, LimitPlan } from './verdict.js';

const ADMIT_SHA = scriptSha(ADMIT_LUA);
const HEARTBEAT_SHA = scriptSha(HEARTBEAT_LUA);
/** Failed releases kept for a retry; beyond this the oldest are left to expire by score. */
const MAX_PENDING_RELEASES = 10_000;

/** One admit waiting for its turn's write. */
interface QueuedAdmit {
  /** The tenant's keys for the month: one cached array per tenant, so the turn groups by identity. */
  readonly keys: string[];
  readonly args: (string | number)[];
  resolve: (v: AdmitReply) => void;
  reject: (e: unknown) => void;
}

/** One script call: a tenant's admits of the turn, decided in order. */
interface AdmitCall {
  readonly keys: string[];
  readonly admits: QueuedAdmit[];
}

/** What the script answers for one admit. */
type AdmitReply = [number, string, string, number, string];

/** Limiter state in Redis; every method may reject (timeout, connection down). */
export class RedisLimitStore {
  readonly #redis: RedisClient;
  readonly #prefix: string;
  /** Tenant id → its five keys for the month they were built for (saves 5 strings per admit). */
  readonly #keys = new Map<string, { month: string; keys: string[] }>();
  /** Slot id → tenant id of releases that did not reach Redis, oldest first. */
  readonly #pending = new Map<string, string>();
  /** Slot id → tenant and the slot's expiry, of admits that failed but may still run (releaseLater). */
  readonly #late = new Map<string, { tenantId: string; expiresAt: number }>();
  /** Admits waiting for this turn's write; null when none is queued. */
  #batch: QueuedAdmit[] | null = null;

  /** An admit not answered within this is failed, whatever the client still retries; 0 = none. */
  readonly #deadlineMs: number;

  constructor(redis: RedisClient, prefix: string, deadlineMs = 0) {
    this.#redis = redis;
    this.#prefix = prefix;
    this.#deadlineMs = deadlineMs;
  }

  /**
   * Decides and takes atomically in one round trip; see ADMIT_LUA for the arguments. The admits
   * of one event-loop turn (flushed by setImmediate) leave as one EVALSHA per tenant, which
   * decides them in order exactly as separate calls would, and the calls of a turn leave in one
   * socket write per Redis node (a pipeline): the bench profile had the per-admit write at 12 %
   * of the pipeline's CPU, and the client-side cost of a command (ioredis) at about 20 µs. On a
   * Cluster the turn's calls are grouped by the master that serves their tenant's slot.
   */
  async admit(
    tenantId: string,
    plan: LimitPlan,
    cost: LimitCost,
    now: number,
    month: { id: string; endMs: number },
    slot: string,
    slotTtlMs: number,
  ): Promise<Decision> {
    const keys = this.#keysFor(tenantId, month.id);
    const reply = await this.#admitCall(keys, [
      now,
      plan.requestIntervalMs,
      plan.requestBurst,
      cost.messages,
      plan.messageIntervalMs,
      plan.messageBurst,
      cost.parkedPoll ? '1' : '0',
      plan.parkedPolls,
      slot,
      slotTtlMs,
      plan.messagesPerMonth,
      cost.ingressBytes,
      plan.ingressBytesPerMonth,
      monthKeyTtlMs(month.endMs, now),
    ]);
    return {
      refused: reply[0],
      requestWaitMs: Number(reply[1]),
      messageWaitMs: Number(reply[2]),
      remaining: reply[3],
      resetMs: Number(reply[4]),
    };
  }

  /** Loads the admit script on every master, so even the first admit is a single EVALSHA (a node that lacks it later, e.g. a promoted replica, learns it via the EVAL fallback). */
  async preload(): Promise<void> {
    const nodes = this.#redis instanceof Cluster ? this.#redis.nodes('master') : [this.#redis];
    await Promise.all(nodes.map((n) => n.script('LOAD', ADMIT_LUA)));
  }

  /** Gives a parked slot back, off the request path; a failure is kept for retryReleases(). */
  release(tenantId: string, slot: string): void {
    this.#redis.zrem(parkedKey(this.#prefix, tenantId), slot).catch(() => this.#keep(tenantId, slot));
  }

  /**
   * Queues a release for retryReleases() without sending it now: for the slot of an admit that
   * failed (timed out). Redis may still run that admit late (a Cluster client re-sends commands to
   * the promoted replica after a failover), so one removal that found nothing does not settle it:
   * the slot is removed again at each retry until a removal finds it or it expires (`expiresAt`,
   * the score the admit gives it).
   */
  releaseLater(tenantId: string, slot: string, expiresAt: number): void {
    if (this.#late.size >= MAX_PENDING_RELEASES) this.#late.delete(this.#late.keys().next().value!);
    this.#late.set(slot, { tenantId, expiresAt });
  }

  /** Sends the releases that failed earlier again (one ZREM per tenant) and those of failed admits (see releaseLater); failures stay kept. */
  async retryReleases(now: number): Promise<void> {
    await Promise.all([this.#retryPending(), this.#retryLate(now)]);
  }

  /** One ZREM per slot, as its count says whether that admit's slot was there. */
  async #retryLate(now: number): Promise<void> {
    for (const [slot, late] of this.#late) if (late.expiresAt <= now) this.#late.delete(slot);
    await Promise.all(
      [...this.#late].map(([slot, late]) =>
        this.#redis.zrem(parkedKey(this.#prefix, late.tenantId), slot).then(
          (removed) => {
            if (removed > 0) this.#late.delete(slot);
          },
          () => {},
        ),
      ),
    );
  }

  async #retryPending(): Promise<void> {
    if (this.#pending.size === 0) return;
    const byTenant = new Map<string, string[]>();
    for (const [slot, tenantId] of this.#pending) {
      const slots = byTenant.get(tenantId);
      if (slots) slots.push(slot);
      else byTenant.set(tenantId, [slot]);
    }
    this.#pending.clear();
    await Promise.all(
      [...byTenant].map(([tenantId, slots]) =>
        this.#redis.zrem(parkedKey(this.#prefix, tenantId), ...slots).catch(() => {
          for (const slot of slots) this.#keep(tenantId, slot);
        }),
      ),
    );
  }

  #keep(tenantId: string, slot: string): void {
    if (this.#pending.size >= MAX_PENDING_RELEASES) this.#pending.delete(this.#pending.keys().next().value!);
    this.#pending.set(slot, tenantId);
  }

  /** Records this instance as live and returns how many instances are live. */
  async heartbeat(instanceId: string, now: number, windowMs: number): Promise<number> {
    return (await evalScript(this.#redis, HEARTBEAT_SHA, HEARTBEAT_LUA, [instancesKey(this.#prefix)], [now, instanceId, windowMs])) as number;
  }

  /** Removes this instance from the live set (on close). */
  async leave(instanceId: string): Promise<void> {
    await this.#redis.zrem(instancesKey(this.#prefix), instanceId);
  }

  #keysFor(tenantId: string, month: string): string[] {
    const cached = this.#keys.get(tenantId);
    if (cached?.month === month) return cached.keys;
    const k = limiterKeys(this.#prefix, tenantId, month);
    const keys = [k.requests, k.messages, k.parked, k.monthMessages, k.monthBytes];
    this.#keys.set(tenantId, { month, keys });
    return keys;
  }

  #admitCall(keys: string[], args: (string | number)[]): Promise<AdmitReply> {
    return new Promise((resolve, reject) => {
      if (this.#batch === null) {
        this.#batch = [];
        setImmediate(() => this.#flush());
      }
      this.#batch.push({ keys, args, resolve, reject });
    });
  }

  #flush(): void {
    const batch = this.#batch!;
    this.#batch = null;
    if (this.#deadlineMs > 0) {
      // The command timeout alone does not bound an admit on a Cluster: while a master is down the
      // client re-sends to it (redirections, slot refreshes), each try with a fresh timeout. One
      // timer per batch fails what is still unanswered, so the fail mode decides in time; a late
      // reply is then ignored (the promise is settled).
      const timer = setTimeout(() => {
        for (const b of batch) b.reject(new Error(`limiter: no reply from Redis within ${this.#deadlineMs} ms`));
      }, this.#deadlineMs);
      timer.unref();
      let open = batch.length;
      const settled = (): void => {
        if (--open === 0) clearTimeout(timer);
      };
      for (const b of batch) {
        const { resolve, reject } = b;
        b.resolve = (v) => {
          settled();
          resolve(v);
        };
        b.reject = (e) => {
          settled();
          reject(e);
        };
      }
    }
    for (const group of this.#byNode(byTenant(batch))) this.#send(group);
  }

  /**
   * The turn's calls by the node that will run them: one group on a single Redis; on a Cluster
   * one per master, since a pipeline goes to one node. A call whose slot owner is not known yet
   * (slot map still loading) goes alone and lets the client route and redirect it.
   */
  #byNode(calls: AdmitCall[]): Iterable<AdmitCall[]> {
    const redis = this.#redis;
    if (!(redis instanceof Cluster) || calls.length === 1) return [calls];
    const groups = new Map<string, AdmitCall[]>();
    const alone: AdmitCall[][] = [];
    for (const c of calls) {
      const node = redis.slots[calculateSlot(c.keys[0]!)]?.[0];
      if (node === undefined) {
        alone.push([c]);
        continue;
      }
      const group = groups.get(node);
      if (group) group.push(c);
      else groups.set(node, [c]);
    }
    return [...groups.values(), ...alone];
  }

  #send(calls: AdmitCall[]): void {
    if (calls.length === 1) {
      const only = calls[0]!;
      const args = callArgs(only);
      evalScript(this.#redis, ADMIT_SHA, ADMIT_LUA, only.keys, args).then(
        (reply) => answer(only, reply),
        (err: unknown) => fail(only, err),
      );
      return;
    }
    const pipeline = this.#redis.pipeline();
    const argsOf = calls.map(callArgs);
    for (let i = 0; i < calls.length; i++) pipeline.evalsha(ADMIT_SHA, calls[i]!.keys.length, ...calls[i]!.keys, ...argsOf[i]!);
    pipeline.exec().then(
      (replies) => {
        for (let i = 0; i < calls.length; i++) {
          const c = calls[i]!;
          const [err, reply] = replies?.[i] ?? [new Error('no reply from Redis'), null];
          if (err === null) answer(c, reply);
          else if (isNoScript(err))
            this.#redis.eval(ADMIT_LUA, c.keys.length, ...c.keys, ...argsOf[i]!).then(
              (r) => answer(c, r),
              (e: unknown) => fail(c, e),
            );
          else fail(c, err);
        }
      },
      (err: unknown) => {
        for (const c of calls) fail(c, err);
      },
    );
  }
}

/** The turn's admits as one call per tenant (same keys array), in arrival order. */
function byTenant(batch: QueuedAdmit[]): AdmitCall[] {
  if (batch.length === 1) return [{ keys: batch[0]!.keys, admits: batch }];
  const calls = new Map<string[], QueuedAdmit[]>();
  for (const b of batch) {
    const admits = calls.get(b.keys);
    if (admits) admits.push(b);
    else calls.set(b.keys, [b]);
  }
  return [...calls].map(([keys, admits]) => ({ keys, admits }));
}

function callArgs(c: AdmitCall): (string | number)[] {
  const args: (string | number)[] = [c.admits.length];
  for (const a of c.admits) for (let i = 0; i < ADMIT_ARGS; i++) args.push(a.args[i]!);
  return args;
}

/** Hands each admit of `c` its five values of the script's flat reply. */
function answer(c: AdmitCall, reply: unknown): void {
  if (!Array.isArray(reply) || reply.length !== 5 * c.admits.length) {
    fail(c, new Error(`limiter: unexpected reply from Redis for ${c.admits.length} admits`));
    return;
  }
  for (let i = 0; i < c.admits.length; i++) c.admits[i]!.resolve(reply.slice(5 * i, 5 * i + 5) as AdmitReply);
}

function fail(c: AdmitCall, err: unknown): void {
  for (const a of c.admits) a.reject(err);
}
