/** The Redis limit store's batching: the admits of one event-loop turn share one write. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { RedisLimitStore } from '../../src/limits/redis-store.js';
import { compileLimitPlan, monthWindow } from '../../src/limits/verdict.js';
import { parkedKey } from '../../src/redis/keys.js';
import { commandCalls, connectTest, PrivateRedis, uniquePrefix } from '../helpers/redis.js';

let server: PrivateRedis;
let client: Redis;
let probe: Redis;

beforeAll(async () => {
  server = await PrivateRedis.start();
  client = await connectTest(server.url, 2000);
  probe = await connectTest(server.url, 2000);
});
afterAll(async () => {
  client.disconnect();
  probe.disconnect();
  await server.kill();
});

const plan = compileLimitPlan(
  { requestsPerSec: 1, requestBurst: 3, messagesPerSec: 1000, messageBurst: 1000, parkedPolls: 10, maxPayloadBytes: 1024, maxBatch: 10 },
  { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
);
const cost = { messages: 0, ingressBytes: 0, parkedPoll: false };

describe('RedisLimitStore batching', () => {
  it('decides each of many same-turn admits on its own, one EVALSHA per tenant, also right after a script flush', async () => {
    const store = new RedisLimitStore(client, uniquePrefix());
    await probe.script('FLUSH');
    const now = Date.now();
    const month = monthWindow(now);
    const before = await commandCalls(probe);
    // Five tenants, five admits each, all issued in one turn: burst 3 admits 3 per tenant.
    const decisions = await Promise.all(Array.from({ length: 25 }, (_, i) => store.admit(`t${i % 5}`, plan, cost, now, month, `s${i}`, 60000)));
    const after = await commandCalls(probe);
    const admitted = new Map<string, number>();
    decisions.forEach((d, i) => {
      if (d.refused === 0) admitted.set(`t${i % 5}`, (admitted.get(`t${i % 5}`) ?? 0) + 1);
    });
    expect([...admitted.values()]).toEqual([3, 3, 3, 3, 3]);
    // One call per tenant; the flushed script made each EVALSHA fail with NOSCRIPT, and each fell back to EVAL once.
    expect((after.get('evalsha') ?? 0) - (before.get('evalsha') ?? 0)).toBe(5);
    expect((after.get('eval') ?? 0) - (before.get('eval') ?? 0)).toBe(5);
    const again = await Promise.all(Array.from({ length: 4 }, (_, i) => store.admit('fresh', plan, cost, now, month, `f${i}`, 60000)));
    expect(again.map((d) => d.refused === 0)).toEqual([true, true, true, false]);
  });
});

describe('RedisLimitStore deadline', () => {
  it('fails an unanswered admit at its deadline, even when the client would wait longer (a Cluster client re-sending to a dead master)', async () => {
    const frozen = await PrivateRedis.start();
    // The client's own timeout is far longer than the deadline, as a Cluster's retries add up.
    const slow = await connectTest(frozen.url, 10_000);
    try {
      const store = new RedisLimitStore(slow, uniquePrefix(), 200);
      await store.preload();
      frozen.pause();
      const now = Date.now();
      const started = Date.now();
      const outcome = await store.admit('t', plan, cost, now, monthWindow(now), 's', 60000).then(
        () => 'answered',
        (err: Error) => err.message,
      );
      expect(outcome).toMatch(/within 200 ms/);
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      frozen.resume();
      slow.disconnect();
      await frozen.kill();
    }
  });
});

describe('RedisLimitStore releases', () => {
  const parkedCost = { ...cost, parkedPoll: true };
  const removals = async (): Promise<number> => (await commandCalls(probe)).get('zrem') ?? 0;

  it('gives back the slot of a failed admit that runs late, after a retry found nothing to remove', async () => {
    const prefix = uniquePrefix();
    const store = new RedisLimitStore(client, prefix);
    const now = Date.now();
    store.releaseLater('t', 'late', now + 60_000);
    // Retried before the admit ran (a Cluster client still re-sending it): nothing to remove yet.
    await store.retryReleases(now);
    expect((await store.admit('t', plan, parkedCost, now, monthWindow(now), 'late', 60_000)).refused).toBe(0);
    expect(await client.zrange(parkedKey(prefix, 't'), '0', '-1')).toEqual(['late']);
    await store.retryReleases(now);
    expect(await client.zcard(parkedKey(prefix, 't'))).toBe(0);
    // Settled: no removal is sent for it again.
    const settled = await removals();
    await store.retryReleases(now);
    expect(await removals()).toBe(settled);
  });

  it("retries a failed admit's slot until the slot would have expired, then forgets it", async () => {
    const store = new RedisLimitStore(client, uniquePrefix());
    const now = Date.now();
    store.releaseLater('t', 'never', now + 60_000);
    const start = await removals();
    await store.retryReleases(now);
    await store.retryReleases(now + 59_999);
    expect(await removals()).toBe(start + 2);
    await store.retryReleases(now + 60_000);
    expect(await removals()).toBe(start + 2);
  });
});
