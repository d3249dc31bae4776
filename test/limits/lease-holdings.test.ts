/**
 * Leased mode's month holdings (lease-script.ts): a lease call that failed — its reply lost after
 * the script ran, never sent, or timed out while Redis was frozen and run later — loses no month
 * unit; a stale or replayed call changes nothing; the month slice of an instance that died is
 * released by the others once its lease has ended plus the margin, and counted until then. Real
 * Redis and a Redis Cluster; the instance clock is injected, the reclaim age is Redis's own time.
 */
import type { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter, type LeasedOptions } from '../../src/limits/leased.js';
import { LEASE_LUA } from '../../src/limits/lease-script.js';
import { createLimiter, type Admission, type AdmitInput } from '../../src/limits/limiter.js';
import { monthWindow } from '../../src/limits/verdict.js';
import { silentLogger } from '../../src/observability/log.js';
import { limiterKeys } from '../../src/redis/keys.js';
import { compilePlan, compileTenant, type Limits, type Quotas, type Tenant } from '../../src/tenants/model.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { connectTest, flushPrefix, PrivateRedis, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

/** Rates far above what the tests push: only the month quota limits them. */
const LIMITS: Limits = {
  requestsPerSec: 100_000,
  requestBurst: 100_000,
  messagesPerSec: 1000,
  messageBurst: 1000,
  parkedPolls: 5,
  maxPayloadBytes: 1 << 20,
  maxBatch: 1000,
};
const LEASE = { durationMs: 1000, sliceFraction: 0.02 };
let seq = 0;

function tenant(quotas: Quotas, id = `h${++seq}`): Tenant {
  const plan = compilePlan('p', { features: [], limits: LIMITS, quotas, storageBytes: 0 });
  return compileTenant(id, { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null }, plan);
}
const push = (t: Tenant, messages = 1): AdmitInput => ({ tenant: t, messages, ingressBytes: 0, parkedPoll: false });
const pop = (t: Tenant): AdmitInput => ({ tenant: t, messages: 0, ingressBytes: 0, parkedPoll: false });
const admitted = async (a: Admission | Promise<Admission>) => (await a).refusal === null;

/** One instance's holdings record, as LEASE_LUA packs it. */
interface HoldingRecord {
  seq: number;
  at: number;
  spentMessages: number;
  heldMessages: number;
  reclaimedMessages: number;
  /** Redis times after which the holding may be reclaimed and the record forgotten, from the holder's own settings; its margin. */
  reclaimAt: number;
  forgetAt: number;
  margin: number;
}
function parseRecord(v: string): HoldingRecord {
  const [seq, at, spentMessages, , heldMessages, , reclaimedMessages, , reclaimAt, forgetAt, margin] = v.split(' ').map(Number) as number[];
  return {
    seq: seq!,
    at: at!,
    spentMessages: spentMessages!,
    heldMessages: heldMessages!,
    reclaimedMessages: reclaimedMessages!,
    reclaimAt: reclaimAt!,
    forgetAt: forgetAt!,
    margin: margin!,
  };
}
/** The reserved field of the holdings HASH (last call, up since): not an instance's record. */
const UP_FIELD = '~up';

type Fault = 'lost' | 'unsent';

/**
 * The client a LeasedLimiter is given, with its script calls failing on demand: `lost` sends the
 * call and drops the reply after Redis ran it (a timeout or a dropped connection after the
 * script ran); `unsent` fails before anything is sent. `calls` keeps the keys and values of
 * each call Redis ran.
 */
function faultyClient(client: Redis | Cluster, schedule: (call: number) => Fault | null) {
  const calls: (string | number)[][] = [];
  const faults = { lost: 0, unsent: 0 };
  let n = 0;
  let pending: Fault | null | undefined;
  const proxy = new Proxy(client, {
    get(target, prop) {
      if (prop === 'evalsha' || prop === 'eval') {
        return async (...args: (string | number)[]) => {
          // A NOSCRIPT answer to EVALSHA is followed by an EVAL of the same call: one fault for both.
          if (prop === 'evalsha' || pending === undefined) pending = schedule(++n);
          if (pending === 'unsent') {
            faults.unsent++;
            throw new Error('Connection is closed.');
          }
          const reply: unknown = await (target[prop] as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          calls.push(args.slice(1));
          if (pending === 'lost') {
            faults.lost++;
            throw new Error('Command timed out');
          }
          return reply;
        };
      }
      const v: unknown = Reflect.get(target, prop, target);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { client: proxy, calls, faults };
}

describe.each(['redis', 'cluster'] as const)('lease holdings on %s', (kind) => {
  const prefix = uniquePrefix();
  let client: Redis | Cluster;
  let cluster: RedisCluster | undefined;
  let now = Date.parse('2026-12-03T12:00:00Z');
  const clock = () => now;

  beforeAll(async () => {
    if (kind === 'cluster') {
      cluster = await RedisCluster.start();
      client = await cluster.client();
    } else client = await connectTest(SHARED_REDIS_URL, 2000);
  }, 60_000);
  afterAll(async () => {
    if (cluster) await cluster.stop();
    else await flushPrefix(client as Redis, prefix);
    client.disconnect();
  });

  /** An instance as app.ts builds one; its lease calls go through `leaseClient` (by default the shared one). */
  async function instance(
    leaseClient: Redis | Cluster = client,
    options: LeasedOptions = {},
    exactClient: Redis | Cluster = client,
    lease = LEASE,
  ): Promise<LeasedLimiter> {
    const exact = createLimiter(
      { url: null, cluster: [], keyPrefix: prefix, timeoutMs: 500, failMode: 'closed' },
      { log: silentLogger(), clock, redis: exactClient, quotaDenialMs: 2 * LEASE.durationMs },
    );
    const l = new LeasedLimiter(exact, leaseClient, prefix, lease, clock, options);
    await l.start();
    return l;
  }
  const keys = (t: Tenant) => limiterKeys(prefix, t.id, monthWindow(now).id);
  const counter = async (t: Tenant) => Number((await client.get(keys(t).monthMessages)) ?? '0');
  async function records(t: Tenant): Promise<Map<string, HoldingRecord>> {
    const all = await client.hgetall(keys(t).monthHoldings);
    return new Map(
      Object.entries(all)
        .filter(([id]) => id !== UP_FIELD)
        .map(([id, v]) => [id, parseRecord(v)]),
    );
  }
  /** Redis's clock on the node that holds the tenant's keys, in ms. */
  const redisTime = async (t: Tenant) =>
    Number(await client.eval("local t = redis.call('TIME') return t[1] * 1000 + math.floor(t[2] / 1000)", 1, keys(t).monthHoldings));

  /**
   * Pushes of one message through the instances in turn until `total` pushes; returns how many
   * were admitted. With `endLeaseEvery`, every that many pushes the leases end with units unspent,
   * so the next calls have something to give back.
   */
  async function pushRound(t: Tenant, instances: LeasedLimiter[], total: number, quota: number, endLeaseEvery = 0): Promise<number> {
    let count = 0;
    for (let i = 0; i < total; i++) {
      now += endLeaseEvery > 0 && i % endLeaseEvery === endLeaseEvery - 1 ? LEASE.durationMs : 1; // the message bucket refills as fast as the pushes take
      if (await admitted(instances[i % instances.length]!.admit(push(t)))) count++;
      expect(await counter(t)).toBeLessThanOrEqual(quota);
    }
    return count;
  }

  it.each(['lost', 'unsent'] as const)(
    'a lease call whose reply is %s loses no month unit: two instances admit the quota to the last message',
    async (fault) => {
      const quota = 1000;
      const t = tenant({ messagesPerMonth: quota, ingressBytesPerMonth: 0 });
      let failing = true;
      // Every third lease call of one instance fails.
      const faulty = faultyClient(client, (n) => (failing && n % 3 === 0 ? fault : null));
      const a = await instance(faulty.client);
      const b = await instance();
      let count = await pushRound(t, [a, b], 1100, quota, 7);
      expect(faulty.faults[fault]).toBeGreaterThanOrEqual(5);
      failing = false;
      now += 2 * LEASE.durationMs + 1; // the leases ended, and so did the refused quota's local cache
      // Enough for either instance alone to take what is left (the other may be refused from its cache).
      count += await pushRound(t, [a, b], 100, quota);
      expect(count).toBe(quota);
      await a.close();
      await b.close();
      expect(await counter(t)).toBe(quota);
      // Nothing is held once both gave back: every record settled.
      for (const r of (await records(t)).values()) expect(r.heldMessages).toBe(0);
    },
  );

  it('a stale or replayed lease call changes nothing: no second release, no grant, no bucket return', async () => {
    const t = tenant({ messagesPerMonth: 10_000, ingressBytesPerMonth: 0 });
    const faulty = faultyClient(client, () => null);
    const a = await instance(faulty.client);
    expect(await admitted(a.admit(push(t, 3)))).toBe(true); // call 1: a month slice, 3 spent of it
    now += LEASE.durationMs;
    expect(await admitted(a.admit(push(t, 3)))).toBe(true); // call 2: reports 3 spent, releases the rest, takes a new slice
    const [first, second] = faulty.calls.slice(-2) as [(string | number)[], (string | number)[]];
    const state = async () => [
      await client.get(keys(t).requests),
      await client.get(keys(t).messages),
      await counter(t),
      await client.hgetall(keys(t).monthHoldings),
    ];
    const before = await state();
    // Call 1 run after call 2 (an older call a Cluster client resent on a redirection), and call 2 run twice.
    for (const args of [first, second]) {
      const reply = (await client.eval(LEASE_LUA, ...(args as [number, ...(string | number)[]]))) as unknown[];
      expect(reply).toEqual([0, 0, '0', '0', 0, '0', 0, 0, 0]);
    }
    expect(await state()).toEqual(before);
    await a.close();
    // Exactly the two pushes stay counted.
    expect(await counter(t)).toBe(6);
  });

  it('an instance reclaimed while it was only cut off has the units it spent counted again when it reports', async () => {
    const t = tenant({ messagesPerMonth: 10_000, ingressBytesPerMonth: 0 });
    // A margin of 0: its own setting decides when its slice may be reclaimed.
    const a = await instance(client, { reclaimMarginMs: 0 });
    for (let i = 0; i < 5; i++) expect(await admitted(a.admit(push(t)))).toBe(true); // 5 of a slice, not yet reported
    const held = (await records(t)).get(a.instanceId())!;
    expect([held.spentMessages, await counter(t), held.reclaimAt - held.at, held.margin]).toEqual([0, held.heldMessages, LEASE.durationMs, 0]);
    // a makes no call for longer than its lease on Redis's clock: another instance reclaims its slice,
    // spent part included (that is what a killed instance costs: its unreported units are released).
    const reclaimer = await instance();
    await waitFor(async () => (await redisTime(t)) - held.at > LEASE.durationMs, 10_000, "a's lease to end on Redis's clock");
    expect(await admitted(reclaimer.admit(pop(t)))).toBe(true);
    expect([(await records(t)).get(a.instanceId())!.reclaimedMessages, await counter(t)]).toEqual([held.heldMessages, 0]);
    await reclaimer.close();
    // a was alive after all: its next call reports the 5, which count again.
    now += LEASE.durationMs;
    expect(await admitted(a.admit(pop(t)))).toBe(true);
    await a.close();
    expect(await counter(t)).toBe(5);
    const settled = (await records(t)).get(a.instanceId())!;
    expect([settled.spentMessages, settled.heldMessages, settled.reclaimedMessages]).toEqual([5, 0, 0]);
  });

  it('a plan change while slices are held and exchanged: the old lease settles before the new one calls, nothing held is lost', async () => {
    const a = await instance();
    const before = tenant({ messagesPerMonth: 10_000, ingressBytesPerMonth: 0 });
    const after = tenant({ messagesPerMonth: 20_000, ingressBytesPerMonth: 0 }, before.id);
    let messages = 0;
    const send = async (t: Tenant, n: number) => {
      if (await admitted(a.admit(push(t, n)))) messages += n;
    };
    await send(before, 3); // a month slice under the old plan
    // Requests of both tenant objects at once (a directory refresh while requests are in flight):
    // each switch gives the old lease's slices back while the new one waits.
    await Promise.all([send(after, 3), send(before, 2), send(after, 2), send(after, 1)]);
    now += LEASE.durationMs;
    await Promise.all([send(after, 4), send(after, 1)]);
    await a.close();
    expect(messages).toBe(16);
    expect(await counter(after)).toBe(messages);
    // Some of them were admitted exactly (a request that found its lease replaced): the record counts only the leased ones.
    const mine = (await records(after)).get(a.instanceId())!;
    expect(mine.heldMessages).toBe(0);
    expect(mine.spentMessages).toBeLessThanOrEqual(messages);
  });

  it('the month slice of an instance that died is counted until its lease and the margin have passed, then reclaimed by another instance', async () => {
    const quota = 200;
    const t = tenant({ messagesPerMonth: quota, ingressBytesPerMonth: 0 });
    // The instance that dies has its own connection (a process of its own) and is never closed.
    const own = kind === 'cluster' ? await cluster!.client() : await connectTest(SHARED_REDIS_URL, 2000);
    // Its own margin decides when its slice may be reclaimed (short here, for the test's sake).
    const margin = 3_000;
    const a = await instance(own, { reclaimMarginMs: margin }, own);
    let count = 0;
    if (await admitted(a.admit(push(t)))) count++;
    now += LEASE.durationMs;
    // A pop renews the lease: the call reports the message spent and takes a month slice (the
    // pushes so far make it ask for one) that the pop does not spend. Then the process is gone.
    expect(await admitted(a.admit(pop(t)))).toBe(true);
    own.disconnect();
    const aRecord = (await records(t)).get(a.instanceId())!;
    expect(aRecord.spentMessages).toBe(1);
    expect(aRecord.heldMessages).toBeGreaterThan(0);
    expect(aRecord.reclaimAt - aRecord.at).toBe(LEASE.durationMs + margin);

    // Before a's lease and margin have passed (b calls right away), a's slice stays counted. b's
    // own margin is long: whatever the timing, its slice is never reclaimed in this test.
    const b = await instance(client, { reclaimMarginMs: 3_600_000 });
    if (await admitted(b.admit(push(t)))) count++;
    const seen = await records(t);
    expect(seen.get(a.instanceId())).toEqual(aRecord);
    const bRecord = seen.get(b.instanceId())!;
    expect(await counter(t)).toBe(aRecord.spentMessages + aRecord.heldMessages + bRecord.heldMessages);

    // Once Redis's clock is past a's lease plus its margin, the next call of any instance releases it.
    const reclaimer = await instance();
    await waitFor(async () => (await redisTime(t)) > aRecord.reclaimAt, 10_000, "a's reclaim time on Redis's clock");
    if (await admitted(reclaimer.admit(push(t)))) count++;
    const after = (await records(t)).get(a.instanceId())!;
    expect([after.heldMessages, after.reclaimedMessages]).toEqual([0, aRecord.heldMessages]);
    await reclaimer.close();

    // The quota is used to the last message.
    count += await pushRound(t, [b], quota, quota);
    now += 2 * LEASE.durationMs + 1;
    count += await pushRound(t, [b], 40, quota);
    expect(count).toBe(quota);
    await b.close();
    expect(await counter(t)).toBe(quota);
    await a.close(); // its connection is gone: nothing is sent
  });

  it('instances with different lease durations: one with a short lease never reclaims a live slice of one with a long lease, and the quota holds', async () => {
    // A rolling config change: a runs with a 60 s lease, b with 1 s (both with the default margin).
    const quota = 100;
    const t = tenant({ messagesPerMonth: quota, ingressBytesPerMonth: 0 });
    const a = await instance(client, {}, client, { durationMs: 60_000, sliceFraction: LEASE.sliceFraction });
    const b = await instance();
    let count = 0;
    // a takes a month slice and spends part of it, unreported: its lease is still valid.
    for (let i = 0; i < 3; i++) if (await admitted(a.admit(push(t)))) count++;
    const aRecord = (await records(t)).get(a.instanceId())!;
    expect(aRecord.reclaimAt - aRecord.at).toBe(60_000 + 65_000);
    // Past b's own reclaim age (1 s + 6 s) on Redis's clock and on the instances' clock.
    await waitFor(async () => (await redisTime(t)) - aRecord.at > LEASE.durationMs + LEASE.durationMs + 5_000, 15_000, "b's reclaim age on Redis's clock");
    now += 7_100;
    // b pushes through the quota: a's slice stays counted.
    count += await pushRound(t, [b], 2 * quota, quota);
    expect((await records(t)).get(a.instanceId())).toEqual(aRecord);
    // a spends the rest of its slice inside its lease, then both give back.
    for (let i = 0; i < aRecord.heldMessages; i++) if (await admitted(a.admit(push(t)))) count++;
    await a.close();
    await b.close();
    expect(count).toBeLessThanOrEqual(quota);
    expect(await counter(t)).toBeLessThanOrEqual(quota);
  }, 30_000);

  it('a Redis outage longer than the reclaim age: the first call after it reclaims nothing, the holder reports, and the quota holds', async () => {
    // Same settings everywhere (1 s lease, default margin 1 s + 5 s). a's lease calls fail while Redis is "down".
    const quota = 100;
    const t = tenant({ messagesPerMonth: quota, ingressBytesPerMonth: 0 });
    let down = false;
    const faulty = faultyClient(client, () => (down ? 'unsent' : null));
    const a = await instance(faulty.client);
    const b = await instance();
    let count = 0;
    for (let i = 0; i < 5; i++) if (await admitted(a.admit(push(t)))) count++;
    const aRecord = (await records(t)).get(a.instanceId())!;
    down = true;
    now += LEASE.durationMs; // a's lease ends; its sweep's give-backs fail while Redis is away
    // No lease call of the tenant is answered for longer than a's reclaim age on Redis's clock.
    await waitFor(async () => (await redisTime(t)) > aRecord.reclaimAt + 50, 15_000, "a's reclaim time on Redis's clock");
    now += 6_100;
    down = false;
    // b calls first: after that pause, Redis must answer for a's margin before a's slice is reclaimed.
    const b1 = await pushRound(t, [b], 1, quota);
    count += b1;
    const up = (await client.hget(keys(t).monthHoldings, UP_FIELD))!.split(' ').map(Number);
    expect(up[1]).toBeGreaterThan(aRecord.reclaimAt);
    expect((await records(t)).get(a.instanceId())!.reclaimedMessages).toBe(0);
    count += await pushRound(t, [b], 2 * quota, quota);
    // a reports its 5 (its sweep's retry may already have).
    now += 2 * LEASE.durationMs + 1;
    for (let i = 0; i < 5; i++) if (await admitted(a.admit(push(t)))) count++;
    await a.close();
    await b.close();
    expect(count).toBeLessThanOrEqual(quota);
    expect(await counter(t)).toBeLessThanOrEqual(quota);
    expect((await records(t)).get(a.instanceId())!.reclaimedMessages).toBe(0);
  }, 30_000);
});

describe('lease holdings while Redis is frozen', () => {
  let server: PrivateRedis;
  let client: Redis;
  let probe: Redis;
  let now = Date.parse('2026-12-03T12:00:00Z');
  const prefix = uniquePrefix();

  beforeAll(async () => {
    server = await PrivateRedis.start();
    client = await connectTest(server.url, 300);
    probe = await connectTest(server.url, 2000);
  });
  afterAll(async () => {
    server.resume();
    client.disconnect();
    probe.disconnect();
    await server.kill();
  });

  it('a lease call that timed out but ran once Redis thawed leaves its slice held only until the next call', async () => {
    // The sweep runs every durationMs of real time: a lease longer than the test keeps it from
    // settling the late call before it is looked at. Month slices are the same 20 messages.
    const lease = { durationMs: 60_000, sliceFraction: 0.02 };
    const quota = 200;
    const t = tenant({ messagesPerMonth: quota, ingressBytesPerMonth: 0 });
    const k = limiterKeys(prefix, t.id, monthWindow(now).id);
    const exact = createLimiter(
      { url: null, cluster: [], keyPrefix: prefix, timeoutMs: 300, failMode: 'closed' },
      { log: silentLogger(), clock: () => now, redis: client, quotaDenialMs: 2 * lease.durationMs },
    );
    const l = new LeasedLimiter(exact, client, prefix, lease, () => now);
    await l.start();
    const record = async () => parseRecord((await probe.hget(k.monthHoldings, l.instanceId()))!);
    let count = 0;
    if (await admitted(l.admit(push(t)))) count++;
    const before = await record();
    now += lease.durationMs;
    server.pause();
    // SIGSTOP takes effect asynchronously: wait until a ping goes unanswered.
    const answers = () =>
      Promise.race([
        probe.ping().then(
          () => true,
          () => true,
        ),
        new Promise<boolean>((done) => setTimeout(() => done(false), 100)),
      ]);
    await waitFor(async () => !(await answers()), 5000, 'Redis to freeze');
    // The lease call (and the exact admit it falls back to) time out; Redis runs them once thawed.
    expect((await l.admit(pop(t))).refusal?.code).toBe('limiter_unavailable');
    server.resume();
    await waitFor(async () => (await record()).seq > before.seq, 5000, 'the late lease call to run');
    const late = await record();
    // It took a slice no request will spend: the month counter holds it.
    expect(late.seq).toBe(before.seq + 1);
    expect(late.heldMessages).toBeGreaterThan(0);
    expect(Number(await probe.get(k.monthMessages))).toBe(1 + late.heldMessages);
    await waitFor(() => l.mode() === 'redis', 5000, 'the limiter to use Redis again');
    for (let i = 0; i < quota; i++) {
      now += 1;
      if (await admitted(l.admit(push(t)))) count++;
    }
    now += 2 * lease.durationMs + 1;
    for (let i = 0; i < 20; i++) {
      now += 1;
      if (await admitted(l.admit(push(t)))) count++;
    }
    expect(count).toBe(quota);
    await l.close();
    expect(Number(await probe.get(k.monthMessages))).toBe(quota);
  });
});
