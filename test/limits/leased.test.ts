/** Leased mode: the slice-sizing decisions, and lease / spend / return against a real Redis and a Redis Cluster. */
import type { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeasedLimiter } from '../../src/limits/leased.js';
import { callAgainAfterMs, leasable, leaseSlice, leaseWants } from '../../src/limits/lease-slice.js';
import { createLimiter, type Admission, type AdmitInput } from '../../src/limits/limiter.js';
import { compileLimitPlan, monthWindow } from '../../src/limits/verdict.js';
import { silentLogger } from '../../src/observability/log.js';
import { limiterKeys, requestBucketKey } from '../../src/redis/keys.js';
import { compilePlan, compileTenant, type Limits, type Quotas, type Tenant } from '../../src/tenants/model.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { connectTest, flushPrefix, PrivateRedis, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const LIMITS: Limits = {
  requestsPerSec: 10,
  requestBurst: 20,
  messagesPerSec: 100,
  messageBurst: 100,
  parkedPolls: 5,
  maxPayloadBytes: 1 << 20,
  maxBatch: 100,
};
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
  const plan = compileLimitPlan(LIMITS, { messagesPerMonth: 1000, ingressBytesPerMonth: 1 << 30 });
  const cost = (more: Partial<AdmitInput>) => ({ messages: 0, ingressBytes: 0, parkedPoll: false, ...more });

  it('admits locally everything but parked polls and pushes larger than the message burst', () => {
    expect(leasable(plan, cost({}))).toBe(true);
    expect(leasable(plan, cost({ ingressBytes: 500 }))).toBe(true);
    expect(leasable(plan, cost({ messages: 100, ingressBytes: 500 }))).toBe(true);
    expect(leasable(plan, cost({ messages: 101 }))).toBe(false);
    expect(leasable(plan, cost({ parkedPoll: true }))).toBe(false);
  });
});

describe('leaseWants', () => {
  const plan = compileLimitPlan(LIMITS, NO_QUOTAS);
  const lease = { durationMs: 1000, sliceFraction: 0.25 };
  const cost = (messages: number, ingressBytes: number) => ({ messages, ingressBytes, parkedPoll: false });

  it('asks for no messages or bytes for a tenant that only pops, so other instances can have them', () => {
    expect(leaseWants(plan, 1, lease, { messagesPerRequest: 0, bytesPerRequest: 0 }, cost(0, 0))).toEqual({ requests: 5, messages: 0, bytes: 0 });
  });

  it('sizes message and byte slices by what a request slice of the recent traffic spends, capped at a message slice', () => {
    // Requests: 5 per slice; 2 messages of 300 bytes each per request.
    expect(leaseWants(plan, 1, lease, { messagesPerRequest: 2, bytesPerRequest: 300 }, cost(2, 300))).toEqual({ requests: 5, messages: 10, bytes: 1500 });
    expect(leaseWants(plan, 1, lease, { messagesPerRequest: 20, bytesPerRequest: 300 }, cost(2, 300))).toEqual({ requests: 5, messages: 25, bytes: 1500 });
  });

  it('never asks for less than the request at hand needs', () => {
    expect(leaseWants(plan, 1, lease, { messagesPerRequest: 0.1, bytesPerRequest: 10 }, cost(7, 9000))).toEqual({ requests: 5, messages: 7, bytes: 9000 });
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

  function tenant(limits: Partial<Limits> = {}, quotas: Quotas = NO_QUOTAS): Tenant {
    const plan = compilePlan('p', { features: [], limits: { ...LIMITS, ...limits }, quotas, storageBytes: 0 });
    return compileTenant(
      `t${++seq}`,
      { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null },
      plan,
    );
  }
  const input = (t: Tenant, more: Partial<AdmitInput> = {}): AdmitInput => ({ tenant: t, messages: 0, ingressBytes: 0, parkedPoll: false, ...more });

  async function leased(sliceFraction = 0.25): Promise<LeasedLimiter> {
    // As app.ts builds it: a refused quota is rechecked after two leases.
    const exact = createLimiter(
      { url: null, cluster: [], keyPrefix: prefix, timeoutMs: 500, failMode: 'closed' },
      { log: silentLogger(), clock, redis: client, quotaDenialMs: 2000 },
    );
    // 10/s, burst 20, one instance: slice = min(10 × 1 s, 0.25 × 20) = 5.
    const l = new LeasedLimiter(exact, client, prefix, { durationMs: 1000, sliceFraction }, clock);
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

  it('refuses before the body what the lease would refuse without a call, and lets heads through once a slice could come', async () => {
    const l = await leased();
    const t = tenant({ requestsPerSec: 10, requestBurst: 20 });
    // Nothing leased yet: the head alone decides nothing.
    expect(l.preAdmit(input(t))).toBeNull();
    for (let i = 0; i < 20; i++) expect(await admitted(l.admit(input(t)))).toBe(true);
    expect((await l.admit(input(t))).refusal?.code).toBe('rate_limited');
    const head = l.preAdmit(input(t, { ingressBytes: 1_000_000 }));
    expect(head?.refusal?.code).toBe('rate_limited');
    expect(head?.refusal?.retryAfterSec).toBe(1);
    // A parked poll goes to the exact admit, which may still find a token: its head is not refused here.
    expect(l.preAdmit(input(t, { parkedPoll: true }))).toBeNull();
    expect(await bucketTokens(t)).toBe(0);
    now += 500;
    expect(l.preAdmit(input(t))).toBeNull();
    expect(await admitted(l.admit(input(t)))).toBe(true);
    await l.close();
  });

  const keys = (t: Tenant) => limiterKeys(prefix, t.id, monthWindow(now).id);
  const counter = async (key: string) => Number((await client.get(key)) ?? '0');

  it('leases pushes: message and month slices in the same call, spent locally, the unspent part given back', async () => {
    const l = await leased();
    const t = tenant({}, { messagesPerMonth: 10_000, ingressBytesPerMonth: 1 << 30 });
    const push = input(t, { messages: 3, ingressBytes: 100 });
    expect(await admitted(l.admit(push))).toBe(true);
    // One call took 5 requests, and for 5 such pushes 15 messages and 500 bytes.
    expect(await bucketTokens(t)).toBe(15);
    expect([await counter(keys(t).monthMessages), await counter(keys(t).monthBytes)]).toEqual([15, 500]);
    for (let i = 0; i < 4; i++) expect(await admitted(l.admit(push))).toBe(true);
    // Spent locally: nothing moved.
    expect([await bucketTokens(t), await counter(keys(t).monthMessages), await counter(keys(t).monthBytes)]).toEqual([15, 15, 500]);
    // The sixth push takes new slices.
    expect(await admitted(l.admit(push))).toBe(true);
    expect([await bucketTokens(t), await counter(keys(t).monthMessages), await counter(keys(t).monthBytes)]).toEqual([10, 30, 1000]);
    await l.close();
    // close() gave back 4 requests, 12 messages and 400 bytes: the counters hold exactly the six pushes.
    expect([await bucketTokens(t), await counter(keys(t).monthMessages), await counter(keys(t).monthBytes)]).toEqual([14, 18, 600]);
    const messageTat = Number(await client.get(keys(t).messages));
    expect(messageTat - now).toBeCloseTo(18 * 10, 6);
  });

  it('refuses a push locally while the message bucket cannot give a slice, taking nothing', async () => {
    const l = await leased();
    // Message slice min(100 × 1 s, 0.25 × 100) = 25: five pushes of 5.
    const t = tenant({ requestsPerSec: 1000, requestBurst: 1000 });
    const push = input(t, { messages: 5 });
    for (let i = 0; i < 20; i++) expect(await admitted(l.admit(push))).toBe(true);
    const before = await client.get(keys(t).messages);
    const refused = await l.admit(push);
    expect(refused.refusal?.code).toBe('rate_limited');
    expect(refused.refusal?.retryAfterSec).toBe(1);
    expect(await client.get(keys(t).messages)).toBe(before);
    // Pops do not need the message bucket: still admitted from the request slice.
    expect(await admitted(l.admit(input(t)))).toBe(true);
    now += 250; // a slice of 25 messages has refilled
    for (let i = 0; i < 5; i++) expect(await admitted(l.admit(push))).toBe(true);
    expect((await l.admit(push)).refusal?.code).toBe('rate_limited');
    await l.close();
  });

  it('sends parked polls and pushes larger than the message burst to the exact admit, on the same state', async () => {
    const l = await leased();
    const t = tenant();
    expect(await admitted(l.admit(input(t, { parkedPoll: true })))).toBe(true);
    expect(await client.zcard(keys(t).parked)).toBe(1);
    // 130 messages > a burst of 100: only the exact admit lets it through, as debt, with one request token.
    expect(await admitted(l.admit(input(t, { messages: 130 })))).toBe(true);
    expect(Number(await client.get(keys(t).messages)) - now).toBeCloseTo(1300, 6);
    expect(await bucketTokens(t)).toBe(18);
    await l.close();
  });

  it('takes a slice of its own size for a push larger than a slice', async () => {
    const l = await leased();
    const t = tenant();
    expect(await admitted(l.admit(input(t, { messages: 2 })))).toBe(true); // a slice of 10 messages
    expect(await admitted(l.admit(input(t, { messages: 60 })))).toBe(true); // 8 go back, 60 are taken
    expect(Number(await client.get(keys(t).messages)) - now).toBeCloseTo(620, 6);
    await l.close();
    expect(Number(await client.get(keys(t).messages)) - now).toBeCloseTo(620, 6);
  });

  it('admits a request that arrives while its slices are being exchanged, from what the call brings back', async () => {
    const l = await leased();
    const t = tenant({}, { messagesPerMonth: 0, ingressBytesPerMonth: 1 << 30 });
    // The bucket holds exactly one slice (5 of 20): after the grant, the next call must wait.
    await client.set(requestBucketKey(prefix, t.id), String(now + 1500));
    expect(await admitted(l.admit(input(t, { ingressBytes: 100 })))).toBe(true);
    // A body larger than the byte slice: a new call, which gives back the 4 requests held.
    const big = l.admit(input(t, { ingressBytes: 10_000 }));
    const pop = l.admit(input(t));
    expect([await admitted(big), await admitted(pop)]).toEqual([true, true]);
    await l.close();
  });

  it('gives back its own month slice before an exact admit, which would count it as used', async () => {
    const l = await leased();
    const t = tenant(
      { requestsPerSec: 1000, requestBurst: 1000, messagesPerSec: 1000, messageBurst: 100 },
      { messagesPerMonth: 1000, ingressBytesPerMonth: 0 },
    );
    await client.set(keys(t).monthMessages, '850');
    expect(await admitted(l.admit(input(t, { messages: 3 })))).toBe(true); // a month slice of 25: the counter reads 875
    expect(await counter(keys(t).monthMessages)).toBe(875);
    now += 10; // the message bucket is full again: a push over the burst passes only then
    // 853 + 140 = 993 fits; 140 > the burst goes to the exact admit.
    expect(await admitted(l.admit(input(t, { messages: 140 })))).toBe(true);
    expect(await counter(keys(t).monthMessages)).toBe(993);
    await l.close();
  });

  it('names the month end in Retry-After for a spent quota, also when the refusal comes from the local cache', async () => {
    const l = await leased();
    const t = tenant({}, { messagesPerMonth: 1000, ingressBytesPerMonth: 0 });
    await client.set(keys(t).monthMessages, '1000');
    const monthEndSec = Math.ceil((monthWindow(now).endMs - now) / 1000);
    const first = (await l.admit(input(t, { messages: 1 }))).refusal;
    now += 1000;
    const cached = l.preAdmit(input(t, { messages: 1 }))?.refusal;
    expect([first?.code, first?.retryAfterSec]).toEqual(['quota_exceeded', monthEndSec]);
    expect([cached?.code, cached?.retryAfterSec]).toEqual(['quota_exceeded', monthEndSec - 1]);
    await l.close();
  });

  it('never admits above a month quota, and uses it to the last message once held slices are back', async () => {
    // Two instances; month slices of 20 messages (0.02 × a burst of 1000), then 10 each.
    const a = await leased(0.02);
    const b = await leased(0.02);
    const t = tenant(
      { requestsPerSec: 100_000, requestBurst: 100_000, messagesPerSec: 1000, messageBurst: 1000 },
      { messagesPerMonth: 1000, ingressBytesPerMonth: 0 },
    );
    let count = 0;
    const push = async (l: LeasedLimiter) => {
      now += 1; // the message bucket refills as fast as the pushes take
      if (await admitted(l.admit(input(t, { messages: 1 })))) count++;
      expect(await counter(keys(t).monthMessages)).toBeLessThanOrEqual(1000);
    };
    for (let i = 0; i < 1100; i++) await push(i % 2 === 0 ? a : b);
    expect(count).toBeLessThanOrEqual(1000);
    now += 2001; // the leases ended, and so did the refused quota's local cache
    for (let i = 0; i < 40; i++) await push(i % 2 === 0 ? a : b);
    expect(count).toBe(1000);
    await a.close();
    await b.close();
    expect(await counter(keys(t).monthMessages)).toBe(1000);
  });

  it('takes no month slice once the quota lacks room for (instances + 1) slices: the rest is admitted exactly', async () => {
    // One instance, month slices of 20 messages: slices while 40 or more are left, then exact admits.
    const l = await leased(0.02);
    const t = tenant(
      { requestsPerSec: 100_000, requestBurst: 100_000, messagesPerSec: 1000, messageBurst: 1000 },
      { messagesPerMonth: 100, ingressBytesPerMonth: 0 },
    );
    const push = () => l.admit(input(t, { messages: 1 }));
    for (let i = 0; i < 81; i++) {
      now += 1;
      expect(await admitted(push())).toBe(true);
    }
    // Four slices (80), then the 81st push was admitted exactly: the counter holds no unspent slice.
    expect(await counter(keys(t).monthMessages)).toBe(81);
    for (let i = 0; i < 19; i++) expect(await admitted(push())).toBe(true);
    expect((await push()).refusal?.code).toBe('quota_exceeded');
    expect(await counter(keys(t).monthMessages)).toBe(100);
    await l.close();
  });

  it('rechecks a refused quota after quotaDenialMs, since slices held elsewhere go back to it', async () => {
    const exact = createLimiter(
      { url: null, cluster: [], keyPrefix: prefix, timeoutMs: 500, failMode: 'closed' },
      { log: silentLogger(), clock, redis: client, quotaDenialMs: 2000 },
    );
    await exact.start();
    const t = tenant({}, { messagesPerMonth: 100, ingressBytesPerMonth: 0 });
    // Another instance holds a slice of 30 of the 100.
    await client.set(keys(t).monthMessages, '90');
    expect((await exact.admit(input(t, { messages: 20 }))).refusal?.code).toBe('quota_exceeded');
    await client.set(keys(t).monthMessages, '60'); // it gave the slice back
    now += 1999;
    expect(exact.preAdmit(input(t, { messages: 20 }))?.refusal?.code).toBe('quota_exceeded');
    now += 1;
    expect(exact.preAdmit(input(t, { messages: 20 }))).toBeNull();
    expect((await exact.admit(input(t, { messages: 20 }))).refusal).toBeNull();
    await exact.close();
  });

  it('does not give a month slice back to the next month', async () => {
    const l = await leased();
    const t = tenant({}, { messagesPerMonth: 10_000, ingressBytesPerMonth: 0 });
    const saved = now;
    now = Date.parse('2026-11-30T23:59:59.800Z');
    const november = keys(t).monthMessages;
    expect(await admitted(l.admit(input(t, { messages: 3 })))).toBe(true);
    expect(await counter(november)).toBe(15);
    now = Date.parse('2026-12-01T00:00:00.100Z');
    // Another instance already admitted 100 messages in December.
    await client.set(keys(t).monthMessages, '100');
    expect(await admitted(l.admit(input(t, { messages: 3 })))).toBe(true);
    // November keeps its slice (it is not read after its month); December only gains the new one.
    expect([await counter(november), await counter(keys(t).monthMessages)]).toEqual([15, 115]);
    await l.close();
    expect(await counter(keys(t).monthMessages)).toBe(103);
    now = saved;
  });
});

describe('LeasedLimiter while Redis is away', () => {
  let server: PrivateRedis;
  let client: Redis;
  let now = Date.parse('2026-12-03T12:00:00Z');
  const t = compileTenant(
    'acme',
    { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null },
    compilePlan('p', { features: [], limits: LIMITS, quotas: NO_QUOTAS, storageBytes: 0 }),
  );
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
    const exact = createLimiter(
      { url: null, cluster: [], keyPrefix: prefix, timeoutMs: 300, failMode },
      { log: silentLogger(), clock: () => now, redis: client },
    );
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
