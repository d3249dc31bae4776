/** Leased mode: the slice-sizing decision, and lease / spend / return against a real Redis. */
import type { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter } from '../../src/limits/leased.js';
import { callAgainAfterMs, leasable, leaseSlice } from '../../src/limits/lease-slice.js';
import { createLimiter, type Admission, type AdmitInput } from '../../src/limits/limiter.js';
import { compileLimitPlan } from '../../src/limits/verdict.js';
import { silentLogger } from '../../src/observability/log.js';
import { requestBucketKey } from '../../src/redis/keys.js';
import { compilePlan, compileTenant, type Limits, type Tenant } from '../../src/tenants/model.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { connectTest, flushPrefix, PrivateRedis, SHARED_REDIS_URL, uniquePrefix, waitFor } from '../helpers/redis.js';

const LIMITS: Limits = { requestsPerSec: 10, requestBurst: 20, messagesPerSec: 100, messageBurst: 100, parkedPolls: 5, maxPayloadBytes: 1 << 20, maxBatch: 100 };
const NO_QUOTAS = { messagesPerMonth: 0, ingressBytesPerMonth: 0 };

describe('leaseSlice', () => {
  const plan = (requestsPerSec: number, requestBurst: number) => compileLimitPlan({ ...LIMITS, requestsPerSec, requestBurst }, NO_QUOTAS);

  it('takes the instance share of the smaller of one lease of refill and the burst fraction', () => {
    // 100/s over 1 s = 100; 0.4 × 100 = 40; three instances: 13 each.
    expect(leaseSlice(plan(100, 100), 3, { durationMs: 1000, sliceFraction: 0.4 })).toBe(13);
    // A large burst: the refill during one lease bounds it (100/s × 0.2 s = 20, two instances: 10).
    expect(leaseSlice(plan(100, 10_000), 2, { durationMs: 200, sliceFraction: 0.5 })).toBe(10);
  });

  it('shrinks as instances join, so all slices together stay within sliceFraction × burst', () => {
    const p = plan(1000, 1000);
    const lease = { durationMs: 1000, sliceFraction: 0.25 };
    for (const n of [1, 2, 3, 5, 8, 50]) expect(n * leaseSlice(p, n, lease)).toBeLessThanOrEqual(250);
    expect(leaseSlice(p, 1, lease)).toBe(250);
    expect(leaseSlice(p, 8, lease)).toBe(31);
  });

  it('is at least one token, even for a slow tenant with many instances', () => {
    expect(leaseSlice(plan(0.5, 1), 10, { durationMs: 1000, sliceFraction: 0.1 })).toBe(1);
    expect(leaseSlice(plan(100, 100), 0, { durationMs: 1000, sliceFraction: 0.5 })).toBe(50);
  });
});

describe('callAgainAfterMs', () => {
  it('waits only for the bucket after a full grant', () => {
    expect(callAgainAfterMs(10, 10, 0, 3, 10)).toBe(0);
    expect(callAgainAfterMs(10, 10, 40, 3, 10)).toBe(40);
  });

  it('after a short grant, also leaves each other instance half a slice of refill', () => {
    // Three instances, slices of 10 at 10 ms a token: 100 ms for the bucket, plus 2 × 50 ms.
    expect(callAgainAfterMs(3, 10, 100, 3, 10)).toBe(200);
    expect(callAgainAfterMs(0, 10, 100, 1, 10)).toBe(100);
  });

  it('lets contending instances together take more than the rate, so a backlog drains', () => {
    // Each of n instances takes a slice s every s·T·(1 + (n − 1)/2) ms at most.
    for (const n of [2, 3, 8]) {
      const s = 10;
      const t = 10;
      const period = callAgainAfterMs(0, s, s * t, n, t);
      const tokensPerMs = (n * s) / period;
      expect(tokensPerMs).toBeGreaterThan(1 / t);
    }
  });
});

describe('leasable', () => {
  const free = compileLimitPlan(LIMITS, NO_QUOTAS);
  const capped = compileLimitPlan(LIMITS, { messagesPerMonth: 1000, ingressBytesPerMonth: 1 << 30 });

  it('admits locally only requests whose one shared dimension is the request rate', () => {
    expect(leasable(capped, { messages: 0, ingressBytes: 0, parkedPoll: false })).toBe(true);
    expect(leasable(free, { messages: 0, ingressBytes: 500, parkedPoll: false })).toBe(true);
    expect(leasable(capped, { messages: 0, ingressBytes: 500, parkedPoll: false })).toBe(false);
    expect(leasable(free, { messages: 1, ingressBytes: 0, parkedPoll: false })).toBe(false);
    expect(leasable(free, { messages: 0, ingressBytes: 0, parkedPoll: true })).toBe(false);
  });
});

// On a Cluster the script's one key carries the tenant's hash tag, so the client routes it.
describe.each(['redis', 'cluster'] as const)('LeasedLimiter on %s', (kind) => {
  const prefix = uniquePrefix();
  let client: Redis | Cluster;
  let cluster: RedisCluster | undefined;
  let seq = 0;
  let now = Date.parse('2026-12-03T12:00:00Z');
  const clock = () => now;

  beforeAll(async () => {
    if (kind === 'cluster') {
      cluster = await RedisCluster.start();
      client = await cluster.client();
    } else client = await connectTest(SHARED_REDIS_URL, 2000);
  }, 60_000);
  afterAll(async () => {
    // The cluster is private and goes whole; the shared Redis loses only this file's keys.
    if (cluster) await cluster.stop();
    else await flushPrefix(client as Redis, prefix);
    client.disconnect();
  });

  function tenant(limits: Partial<Limits> = {}): Tenant {
    const plan = compilePlan('p', { features: [], limits: { ...LIMITS, ...limits }, quotas: NO_QUOTAS, storageBytes: 0 });
    return compileTenant(`t${++seq}`, { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null }, plan);
  }
  const input = (t: Tenant, more: Partial<AdmitInput> = {}): AdmitInput => ({ tenant: t, messages: 0, ingressBytes: 0, parkedPoll: false, ...more });

  async function leased(): Promise<LeasedLimiter> {
    const exact = createLimiter({ url: null, cluster: [], keyPrefix: prefix, timeoutMs: 500, failMode: 'closed' }, { log: silentLogger(), clock, redis: client });
    // 10/s, burst 20, one instance: slice = min(10 × 1 s, 0.25 × 20) = 5.
    const l = new LeasedLimiter(exact, client, prefix, { durationMs: 1000, sliceFraction: 0.25 }, clock);
    await l.start();
    return l;
  }
  /** Tokens the shared bucket holds now (burst − backlog / interval). */
  async function bucketTokens(t: Tenant): Promise<number> {
    const tat = Number((await client.get(requestBucketKey(prefix, t.id))) ?? '0');
    return Math.round(20 - Math.max(0, tat - now) / 100);
  }
  const admitted = async (a: Admission | Promise<Admission>) => (await a).refusal === null;

  it('takes a slice in one call, spends it locally, and gives back the unspent part when the lease ends', async () => {
    const l = await leased();
    const t = tenant();
    expect(await admitted(l.admit(input(t)))).toBe(true);
    expect(await bucketTokens(t)).toBe(15);
    for (let i = 0; i < 2; i++) expect(await admitted(l.admit(input(t)))).toBe(true);
    // Spent locally: the bucket did not move.
    expect(await bucketTokens(t)).toBe(15);
    now += 1000; // the lease ended with 2 unspent; the bucket refilled 10 (to its cap of 20 minus nothing held)
    expect(await admitted(l.admit(input(t)))).toBe(true);
    // 15 + 10 refill = 20 (capped: 25 → 20, the 2 returned fall off a full bucket), minus the new slice of 5.
    expect(await bucketTokens(t)).toBe(15);
    await l.close();
    // close() returned the 4 unspent tokens of the last slice.
    expect(await bucketTokens(t)).toBe(19);
  });

  it('returns what a lease did not spend to a bucket that other instances emptied', async () => {
    const a = await leased();
    const b = await leased();
    const t = tenant();
    let admittedA = 0;
    for (let i = 0; i < 2; i++) if (await admitted(a.admit(input(t)))) admittedA++;
    // b (two live instances now: slices of 2) drains the 15 that a does not hold, down to the one
    // token that is less than a slice: b waits for a slice rather than calling for single tokens.
    let admittedB = 0;
    for (let i = 0; i < 30; i++) if (await admitted(b.admit(input(t)))) admittedB++;
    await b.close();
    expect([admittedA, admittedB]).toEqual([2, 14]);
    expect(await bucketTokens(t)).toBe(1);
    await a.close(); // a returns its 3 unspent
    expect(await bucketTokens(t)).toBe(4);
  });

  it('refuses from an empty bucket without taking anything, and names the wait', async () => {
    const l = await leased();
    const t = tenant({ requestsPerSec: 10, requestBurst: 20 });
    for (let i = 0; i < 20; i++) expect(await admitted(l.admit(input(t)))).toBe(true);
    expect(await bucketTokens(t)).toBe(0);
    const refused = await l.admit(input(t));
    expect(refused.refusal?.code).toBe('rate_limited');
    expect(refused.refusal?.retryAfterSec).toBe(1);
    expect(await bucketTokens(t)).toBe(0);
    // After 0.5 s the bucket holds 5: one call takes them as a slice.
    now += 500;
    for (let i = 0; i < 5; i++) expect(await admitted(l.admit(input(t)))).toBe(true);
    expect((await l.admit(input(t))).refusal?.code).toBe('rate_limited');
    await l.close();
  });

  it('sends requests with other shared dimensions to the exact admit, on the same bucket', async () => {
    const l = await leased();
    const t = tenant();
    expect(await admitted(l.admit(input(t, { messages: 3 })))).toBe(true);
    // The exact admit took one request token and set the message bucket; no slice was taken.
    expect(await bucketTokens(t)).toBe(19);
    expect(await client.exists(`${prefix}{t:${t.id}}:rm`)).toBe(1);
    expect(await admitted(l.admit(input(t)))).toBe(true);
    expect(await bucketTokens(t)).toBe(14);
    await l.close();
  });
});

describe('LeasedLimiter while Redis is away', () => {
  let server: PrivateRedis;
  let client: Redis;
  let now = Date.parse('2026-12-03T12:00:00Z');
  const t = compileTenant('acme', { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null }, compilePlan('p', { features: [], limits: LIMITS, quotas: NO_QUOTAS, storageBytes: 0 }));
  const input: AdmitInput = { tenant: t, messages: 0, ingressBytes: 0, parkedPoll: false };

  beforeAll(async () => {
    server = await PrivateRedis.start();
    client = await connectTest(server.url, 300);
  });
  afterAll(async () => {
    client.disconnect();
    await server.kill();
  });

  it.each(['closed', 'open'] as const)('a failed lease call leaves the decision to failMode %s, as in exact mode', async (failMode) => {
    await server.restart();
    await waitFor(() => client.status === 'ready', 5000, 'the client to reconnect');
    const prefix = uniquePrefix();
    const exact = createLimiter({ url: null, cluster: [], keyPrefix: prefix, timeoutMs: 300, failMode }, { log: silentLogger(), clock: () => now, redis: client });
    const l = new LeasedLimiter(exact, client, prefix, { durationMs: 1000, sliceFraction: 0.25 }, () => now);
    await l.start();
    expect((await l.admit(input)).refusal).toBeNull();
    await server.kill();
    now += 1000; // the slice has ended: the next request needs Redis
    const during = await l.admit(input);
    if (failMode === 'closed') expect(during.refusal?.code).toBe('limiter_unavailable');
    else expect(during).toMatchObject({ refusal: null, headers: null });
    expect(l.mode()).toBe(failMode);
    await l.close();
  });
});
