/** One behavioural suite, run against the memory store, a real Redis and a real Redis Cluster. */
import type { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { createLimiter, type Admission, type AdmitInput, type EdgeLimiter } from '../../src/limits/limiter.js';
import { silentLogger } from '../../src/observability/log.js';
import { limiterKeys, parkedKey } from '../../src/redis/keys.js';
import { compilePlan, compileTenant, type Limits, type Tenant } from '../../src/tenants/model.js';
import { commandCalls, connectTest, flushPrefix, PrivateRedis, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { RedisCluster } from '../helpers/redis-cluster.js';

const BASE_LIMITS: Limits = {
  requestsPerSec: 0.5,
  requestBurst: 3,
  messagesPerSec: 100,
  messageBurst: 1000,
  parkedPolls: 2,
  maxPayloadBytes: 1 << 20,
  maxBatch: 1000,
};
let seq = 0;

/** A tenant with its own id (so tests never share counters) and the given plan. */
function tenant(limits: Partial<Limits> = {}, quotas = { messagesPerMonth: 0, ingressBytesPerMonth: 0 }): Tenant {
  const id = `t${++seq}-${process.pid}`;
  const plan = compilePlan('p', { features: [], limits: { ...BASE_LIMITS, ...limits }, quotas, storageBytes: 0 });
  return compileTenant(id, { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null }, plan);
}

function redisCfg(prefix: string, url: string | null): RawConfig['redis'] {
  return { url, cluster: [], keyPrefix: prefix, timeoutMs: 200, failMode: 'closed' };
}

/** A settable virtual clock. */
function virtualClock(start: string) {
  let now = Date.parse(start);
  return {
    now: () => now,
    set: (iso: string) => {
      now = Date.parse(iso);
    },
    advance: (ms: number) => {
      now += ms;
    },
  };
}

const input = (t: Tenant, more: Partial<AdmitInput> = {}): AdmitInput => ({ tenant: t, messages: 0, ingressBytes: 0, parkedPoll: false, ...more });

describe.each(['memory', 'redis', 'cluster'] as const)('limiter (%s store)', (kind) => {
  const prefix = uniquePrefix();
  let client: Redis | Cluster | undefined;
  let cluster: RedisCluster | undefined;

  beforeAll(async () => {
    if (kind === 'redis') client = await connectTest(SHARED_REDIS_URL);
    if (kind === 'cluster') {
      cluster = await RedisCluster.start();
      client = await cluster.client();
    }
  }, 40_000);
  afterAll(async () => {
    // The cluster is private and goes whole; the shared Redis loses only this file's keys.
    if (cluster) await cluster.stop();
    else if (client) {
      await flushPrefix(client as Redis, prefix);
      client.disconnect();
    }
  });

  async function make(clock: () => number, slotTtlMs?: number): Promise<EdgeLimiter> {
    const l = createLimiter(redisCfg(prefix, null), { log: silentLogger(), clock, redis: client, parkedSlotTtlMs: slotTtlMs, heartbeatMs: 60_000 });
    await l.start();
    return l;
  }
  const admit = async (l: EdgeLimiter, i: AdmitInput): Promise<Admission> => l.admit(i);

  it('reports its mode', async () => {
    const l = await make(Date.now);
    expect(l.mode()).toBe(kind === 'memory' ? 'memory' : 'redis');
    await l.close();
  });

  it('preAdmit refuses from what a refusal taught it, counts nothing in the store, and lets a smaller byte cost through to admit', async () => {
    const clock = virtualClock('2026-03-10T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestBurst: 2 }, { messagesPerMonth: 0, ingressBytesPerMonth: 0 });
    // Nothing refused yet: the head alone decides nothing, however often it is asked.
    for (let i = 0; i < 5; i++) expect(l.preAdmit(input(t))).toBeNull();
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    const pre = l.preAdmit(input(t, { ingressBytes: 1_000_000 }));
    expect(pre?.refusal?.code).toBe('rate_limited');
    expect(pre?.refusal?.retryAfterSec).toBe(2);
    expect(pre?.headers?.ratelimit).toBeDefined();
    // Once the bucket could pass again the cache lets the head through.
    clock.advance(2000);
    expect(l.preAdmit(input(t))?.refusal ?? null).toBeNull();
    expect((await admit(l, input(t))).refusal).toBeNull();
    await l.close();
  });

  const passes = (a: Admission | null): boolean => a === null || a.refusal === null;

  it('past a request-rate refusal, preAdmit lets heads through only while fewer are in flight than the bucket holds', async () => {
    const clock = virtualClock('2026-03-10T12:00:00Z');
    const l = await make(clock.now);
    // One request every 2 s, burst 2.
    const t = tenant({ requestBurst: 2 });
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    clock.advance(2000);
    // One request refilled: one head goes on to its body, the other nine are refused before theirs.
    const heads = Array.from({ length: 10 }, () => l.preAdmit(input(t)));
    const passed = heads.filter(passes);
    expect(passed).toHaveLength(1);
    for (const p of heads.filter((x) => !passes(x))) {
      expect(p!.refusal?.code).toBe('rate_limited');
      expect(p!.refusal?.retryAfterSec).toBe(2);
      expect(p!.headers?.ratelimit).toBe('"requests";r=0;t=2');
    }
    // Taking nothing, denied() does not count a head; the one let through is decided by the store, then leaves the count.
    expect(l.denied(input(t))).toBeNull();
    expect((await admit(l, input(t))).refusal).toBeNull();
    passed[0]!.release?.();
    // The store's bucket is empty again: the next head waits for the next refill.
    expect(l.preAdmit(input(t))?.refusal?.code).toBe('rate_limited');
    clock.advance(2000);
    expect(passes(l.preAdmit(input(t)))).toBe(true);
    expect(l.preAdmit(input(t))?.refusal?.code).toBe('rate_limited');
    await l.close();
  });

  it('heads that never reach admit (a refused body, a client gone) leave the count: the tenant is not starved', async () => {
    const clock = virtualClock('2026-03-10T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestBurst: 1 });
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    for (let round = 0; round < 5; round++) {
      clock.advance(2000);
      // A malformed push: let through, never admitted.
      const bad = l.preAdmit(input(t));
      expect(passes(bad)).toBe(true);
      bad?.release?.();
      // The good one after it still finds the store's request.
      const good = l.preAdmit(input(t));
      expect(passes(good)).toBe(true);
      expect((await admit(l, input(t))).refusal).toBeNull();
      good?.release?.();
    }
    await l.close();
  });

  it('a head whose end is never seen (its connection died unanswered) stops counting after one interval', async () => {
    const clock = virtualClock('2026-03-10T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestBurst: 1 });
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    clock.advance(2000);
    // Let through, then never released nor admitted.
    expect(passes(l.preAdmit(input(t)))).toBe(true);
    const refused = l.preAdmit(input(t));
    expect(refused?.refusal?.code).toBe('rate_limited');
    expect(refused?.refusal?.retryAfterSec).toBe(2);
    clock.advance(2000);
    expect(passes(l.preAdmit(input(t)))).toBe(true);
    expect((await admit(l, input(t))).refusal).toBeNull();
    await l.close();
  });

  it('uploads still in flight hold other heads back for one interval at most, not for as long as they last', async () => {
    const clock = virtualClock('2026-03-10T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestsPerSec: 10, requestBurst: 2 });
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    clock.advance(3_600_000);
    // Two long uploads start; a third head waits.
    expect(passes(l.preAdmit(input(t)))).toBe(true);
    expect(passes(l.preAdmit(input(t)))).toBe(true);
    expect(l.preAdmit(input(t))?.refusal?.code).toBe('rate_limited');
    // 30 s later they are still uploading: a bodiless request is not held back by them.
    clock.advance(30_000);
    expect(passes(l.preAdmit(input(t)))).toBe(true);
    expect((await admit(l, input(t))).refusal).toBeNull();
    await l.close();
  });

  it('a full bucket lets no more heads through at once than its burst, however the admits land', async () => {
    const clock = virtualClock('2026-03-10T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestBurst: 3 });
    for (let i = 0; i < 3; i++) expect((await admit(l, input(t))).refusal).toBeNull();
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    // Long after, the bucket is full: three heads, no fourth.
    clock.advance(60_000);
    const heads = Array.from({ length: 3 }, () => l.preAdmit(input(t)));
    expect(heads.every(passes)).toBe(true);
    expect(l.preAdmit(input(t))?.refusal?.code).toBe('rate_limited');
    // As each is admitted and leaves the count, the store's bucket has lost one too: still no room.
    for (const h of heads) {
      expect((await admit(l, input(t))).refusal).toBeNull();
      h?.release?.();
      expect(l.preAdmit(input(t))?.refusal?.code).toBe('rate_limited');
    }
    await l.close();
  });

  it('refuses over requestBurst with Retry-After, and admits again after that many seconds', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant();
    const first = await admit(l, input(t));
    expect(first.refusal).toBeNull();
    expect(first.headers).toEqual({ 'ratelimit-policy': '"requests";q=3;w=6', ratelimit: '"requests";r=2;t=2' });
    await admit(l, input(t));
    await admit(l, input(t));
    const refused = await admit(l, input(t));
    expect(refused.refusal?.code).toBe('rate_limited');
    expect(refused.refusal?.status).toBe(429);
    expect(refused.refusal?.retryAfterSec).toBe(2);
    expect(refused.headers?.ratelimit).toBe('"requests";r=0;t=6');
    expect(refused.refusal?.headers).toEqual(refused.headers);
    clock.advance(1999);
    expect((await admit(l, input(t))).refusal?.code).toBe('rate_limited');
    clock.advance(1);
    expect((await admit(l, input(t))).refusal).toBeNull();
    await l.close();
  });

  it('drains the message bucket 100 at a time', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestsPerSec: 1000, requestBurst: 1000 });
    for (let i = 0; i < 10; i++) expect((await admit(l, input(t, { messages: 100 }))).refusal).toBeNull();
    const refused = await admit(l, input(t, { messages: 100 }));
    expect([refused.refusal?.code, refused.refusal?.retryAfterSec]).toEqual(['rate_limited', 1]);
    // Smaller pushes, and requests without messages, still pass: only that cost is refused.
    expect((await admit(l, input(t, { messages: 0 }))).refusal).toBeNull();
    clock.advance(1000);
    expect((await admit(l, input(t, { messages: 100 }))).refusal).toBeNull();
    await l.close();
  });

  it('a refused request consumes nothing', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestsPerSec: 1, requestBurst: 5, messageBurst: 10, messagesPerSec: 1 });
    expect((await admit(l, input(t, { messages: 10 }))).headers?.ratelimit).toBe('"requests";r=4;t=1');
    const refused = await admit(l, input(t, { messages: 1 }));
    expect(refused.refusal?.code).toBe('rate_limited');
    expect(refused.headers?.ratelimit).toBe('"requests";r=4;t=1');
    expect((await admit(l, input(t))).headers?.ratelimit).toBe('"requests";r=3;t=2');
    await l.close();
  });

  it('parked polls: the N+1th is refused, release gives the slot back (idempotently)', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestsPerSec: 100, requestBurst: 100 });
    const a = await admit(l, input(t, { parkedPoll: true }));
    const b = await admit(l, input(t, { parkedPoll: true }));
    expect([a.refusal, b.refusal]).toEqual([null, null]);
    expect(typeof a.release).toBe('function');
    const c = await admit(l, input(t, { parkedPoll: true }));
    expect([c.refusal?.code, c.refusal?.retryAfterSec, c.release]).toEqual(['rate_limited', 1, null]);
    if (client) expect(await client.zcard(parkedKey(prefix, t.id))).toBe(2);
    a.release!();
    a.release!();
    b.release!();
    if (client) {
      const c2 = client;
      await expect.poll(() => c2.zcard(parkedKey(prefix, t.id))).toBe(0);
    }
    expect((await admit(l, input(t, { parkedPoll: true }))).refusal).toBeNull();
    expect((await admit(l, input(t, { parkedPoll: true }))).refusal).toBeNull();
    // Non-parked requests never take a slot, nor get a release.
    expect((await admit(l, input(t))).release).toBeNull();
    await l.close();
  });

  it('a leaked parked slot stops counting at its expiry', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = await make(clock.now, 70_000);
    const t = tenant({ requestsPerSec: 100, requestBurst: 100, parkedPolls: 1 });
    expect((await admit(l, input(t, { parkedPoll: true }))).refusal).toBeNull(); // never released
    clock.advance(69_999);
    expect((await admit(l, input(t, { parkedPoll: true }))).refusal?.code).toBe('rate_limited');
    clock.advance(1);
    expect((await admit(l, input(t, { parkedPoll: true }))).refusal).toBeNull();
    if (client) expect(await client.zcard(parkedKey(prefix, t.id))).toBe(1);
    await l.close();
  });

  it('monthly message quota: quota_exceeded with Retry-After to the next UTC month, reset in January', async () => {
    const clock = virtualClock('2026-12-31T23:59:30Z');
    const l = await make(clock.now);
    const t = tenant({ requestsPerSec: 100, requestBurst: 100 }, { messagesPerMonth: 150, ingressBytesPerMonth: 0 });
    expect((await admit(l, input(t, { messages: 100 }))).refusal).toBeNull();
    const refused = await admit(l, input(t, { messages: 100 }));
    expect([refused.refusal?.code, refused.refusal?.retryAfterSec]).toEqual(['quota_exceeded', 30]);
    expect((await admit(l, input(t, { messages: 50 }))).refusal).toBeNull();
    // A pop still passes: the quota counts messages pushed.
    expect((await admit(l, input(t))).refusal).toBeNull();
    if (client) expect(await client.get(limiterKeys(prefix, t.id, '202612').monthMessages)).toBe('150');
    clock.set('2027-01-01T00:00:00Z');
    expect((await admit(l, input(t, { messages: 100 }))).refusal).toBeNull();
    await l.close();
  });

  it('monthly ingress-bytes quota counts body bytes', async () => {
    const clock = virtualClock('2026-03-31T23:00:00Z');
    const l = await make(clock.now);
    const t = tenant({ requestsPerSec: 100, requestBurst: 100 }, { messagesPerMonth: 0, ingressBytesPerMonth: 1000 });
    expect((await admit(l, input(t, { ingressBytes: 600 }))).refusal).toBeNull();
    const refused = await admit(l, input(t, { ingressBytes: 600 }));
    expect([refused.refusal?.code, refused.refusal?.retryAfterSec]).toEqual(['quota_exceeded', 3600]);
    expect((await admit(l, input(t, { ingressBytes: 400 }))).refusal).toBeNull();
    await l.close();
  });
});

describe('limiter on Redis only', () => {
  const prefix = uniquePrefix();
  let client: Redis;
  beforeAll(async () => {
    client = await connectTest(SHARED_REDIS_URL);
  });
  afterAll(async () => {
    await flushPrefix(client, prefix);
    client.disconnect();
  });

  it('two instances on one Redis share one budget', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const opts = { log: silentLogger(), clock: clock.now, redis: client, heartbeatMs: 60_000 };
    const a = createLimiter(redisCfg(prefix, null), opts);
    const b = createLimiter(redisCfg(prefix, null), opts);
    await Promise.all([a.start(), b.start()]);
    const t = tenant();
    expect((await a.admit(input(t))).refusal).toBeNull();
    expect((await b.admit(input(t))).refusal).toBeNull();
    expect((await a.admit(input(t))).refusal).toBeNull();
    expect((await b.admit(input(t))).refusal?.code).toBe('rate_limited');
    await Promise.all([a.close(), b.close()]);
  });

  it('answers known refusals from the local deny cache, synchronously, until their reset', async () => {
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = createLimiter(redisCfg(prefix, null), { log: silentLogger(), clock: clock.now, redis: client, heartbeatMs: 60_000 });
    await l.start();
    const t = tenant({ requestsPerSec: 1, requestBurst: 1 });
    expect((await l.admit(input(t))).refusal).toBeNull();
    expect((await l.admit(input(t))).refusal?.code).toBe('rate_limited');
    const cached = l.admit(input(t));
    expect(cached).not.toBeInstanceOf(Promise);
    expect([(cached as Admission).refusal?.code, (cached as Admission).refusal?.retryAfterSec]).toEqual(['rate_limited', 1]);
    expect((cached as Admission).headers?.['ratelimit-policy']).toBe('"requests";q=1;w=1');
    clock.advance(1000);
    const again = l.admit(input(t));
    expect(again).toBeInstanceOf(Promise);
    expect((await again).refusal).toBeNull();
    await l.close();
  });
});

describe('Redis commands per admit', () => {
  let server: PrivateRedis;
  let client: Redis;
  beforeAll(async () => {
    server = await PrivateRedis.start();
    client = await connectTest(server.url);
  });
  afterAll(async () => {
    client.disconnect();
    await server.kill();
  });

  it('is exactly one (EVALSHA) for every kind of admit, as MONITOR sees it', async () => {
    const l = createLimiter(redisCfg('qe:', null), { log: silentLogger(), redis: client, heartbeatMs: 3_600_000 });
    await l.start();
    const t = tenant(
      { requestsPerSec: 1e6, requestBurst: 1e6, messagesPerSec: 1e9, messageBurst: 1e9, parkedPolls: 1e6 },
      { messagesPerMonth: 1e12, ingressBytesPerMonth: 1e15 },
    );
    const monitor = await client.monitor();
    const sent: string[] = [];
    // Commands a script runs show up with source "lua"; only round trips from clients count.
    monitor.on('monitor', (_time: string, args: string[], source: string) => {
      if (source !== 'lua') sent.push(String(args[0]).toLowerCase());
    });
    const n = 200;
    for (let i = 0; i < n; i++) {
      const a = await l.admit(input(t, { messages: i % 3, ingressBytes: i % 2 ? 100 : 0, parkedPoll: i % 5 === 0 }));
      expect(a.refusal).toBeNull();
    }
    await client.ping('end-of-test');
    await expect.poll(() => sent.at(-1)).toBe('ping');
    monitor.disconnect();
    expect(sent.slice(0, -1)).toEqual(Array.from({ length: n }, () => 'evalsha'));
    await l.close();
  });

  it('shows the script work in INFO commandstats (one EVALSHA per admit, nothing else from the client)', async () => {
    const l = createLimiter(redisCfg('qe2:', null), { log: silentLogger(), redis: client, heartbeatMs: 3_600_000 });
    await l.start();
    const t = tenant({ requestsPerSec: 1e6, requestBurst: 1e6 });
    const before = await commandCalls(client);
    for (let i = 0; i < 100; i++) await l.admit(input(t));
    const after = await commandCalls(client);
    const delta = (cmd: string): number => (after.get(cmd) ?? 0) - (before.get(cmd) ?? 0);
    expect([delta('evalsha'), delta('eval')]).toEqual([100, 0]);
    // The request bucket only: one GET and one SET inside each script run.
    expect([delta('get'), delta('set')]).toEqual([100, 100]);
    await l.close();
  });
});

describe('heads in flight while Redis is away', () => {
  it('are not held back once the breaker opened: failMode open admits, so its heads are not refused for a bucket it cannot see', async () => {
    const server = await PrivateRedis.start();
    const client = await connectTest(server.url);
    const clock = virtualClock('2026-06-01T12:00:00Z');
    const l = createLimiter({ ...redisCfg('qe:', null), failMode: 'open' }, { log: silentLogger(), clock: clock.now, redis: client, heartbeatMs: 3_600_000 });
    await l.start();
    const t = tenant({ requestsPerSec: 1, requestBurst: 1 });
    try {
      expect((await l.admit(input(t))).refusal).toBeNull();
      expect((await l.admit(input(t))).refusal?.code).toBe('rate_limited');
      clock.advance(1000);
      // Redis still there: one head of the refilled request, no second.
      const first = l.preAdmit(input(t));
      expect(first?.refusal ?? null).toBeNull();
      expect(l.preAdmit(input(t))?.refusal?.code).toBe('rate_limited');
      first?.release?.();
      await server.kill();
      // The admit that finds Redis gone opens the breaker; failMode open admits it.
      expect((await l.admit(input(t))).refusal).toBeNull();
      expect(l.mode()).toBe('open');
      for (let i = 0; i < 10; i++) expect(l.preAdmit(input(t))?.refusal ?? null).toBeNull();
    } finally {
      await l.close();
      client.disconnect();
      await server.kill();
    }
  });
});
