/** The limiter with Redis going away and coming back: a private redis-server per file. */
import type { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { createLimiter, type Admission, type AdmitInput, type EdgeLimiter } from '../../src/limits/limiter.js';
import { limiterKeys } from '../../src/redis/keys.js';
import { compilePlan, compileTenant, type Limits, type Tenant } from '../../src/tenants/model.js';
import { connectTest, PrivateRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const LIMITS: Limits = {
  requestsPerSec: 1,
  requestBurst: 10,
  messagesPerSec: 100,
  messageBurst: 1000,
  parkedPolls: 4,
  maxPayloadBytes: 1 << 20,
  maxBatch: 1000,
};
let seq = 0;
/**
 * Redis's answer time that counts as unavailable. Loose enough that a busy machine's scheduling
 * does not pass for an outage while Redis is up; a killed server refuses at once and a paused one
 * costs this one wait.
 */
const TIMEOUT_MS = 1000;

function tenant(): Tenant {
  const plan = compilePlan('p', { features: [], limits: LIMITS, quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 }, storageBytes: 0 });
  return compileTenant(
    `f${++seq}`,
    { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null },
    plan,
  );
}

const input = (t: Tenant): AdmitInput => ({ tenant: t, messages: 0, ingressBytes: 0, parkedPoll: false });

/** A logger that keeps its lines, to check "once per mode change". */
function recordingLog() {
  const lines: { level: number; msg: string }[] = [];
  const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as { level: number; msg: string }) });
  return { log, lines };
}

describe('limiter when Redis fails', () => {
  let server: PrivateRedis;
  let client: Redis;
  const open: EdgeLimiter[] = [];
  const now = Date.parse('2026-06-01T12:00:00Z');
  const clock = (): number => now;

  beforeAll(async () => {
    server = await PrivateRedis.start();
  });
  afterEach(async () => {
    server.resume();
    await server.restart();
    await Promise.all(open.splice(0).map((l) => l.close()));
    client?.disconnect();
  });
  afterAll(async () => {
    await server.kill();
  });

  async function limiter(failMode: RawConfig['redis']['failMode'], log = recordingLog().log): Promise<EdgeLimiter> {
    const l = createLimiter({ url: null, cluster: [], keyPrefix: 'qe:', timeoutMs: TIMEOUT_MS, failMode }, { log, clock, redis: client, heartbeatMs: 50 });
    await l.start();
    open.push(l);
    return l;
  }

  it.each([
    ['open', null],
    ['closed', 'limiter_unavailable'],
    ['local', null],
  ] as const)('failMode %s: decides without Redis, and Redis limits apply again after a restart', async (failMode, code) => {
    client = await connectTest(server.url, TIMEOUT_MS);
    const { log, lines } = recordingLog();
    const l = await limiter(failMode, log);
    const t = tenant();
    expect((await l.admit(input(t))).refusal).toBeNull();
    expect(l.mode()).toBe('redis');

    await server.kill();
    const first = await l.admit(input(t));
    expect(first.refusal?.code ?? null).toBe(code);
    if (code) expect(first.refusal?.status).toBe(503);
    expect(first.headers === null).toBe(failMode !== 'local');
    expect(l.mode()).toBe(failMode);
    // The breaker is open: the next decision is made at once, without a Redis call.
    const second = l.admit(input(t));
    expect(second).not.toBeInstanceOf(Promise);
    expect((second as Admission).refusal?.code ?? null).toBe(code);

    await server.restart();
    await waitFor(() => l.mode() === 'redis', 10_000, 'recovery');
    const back = await l.admit(input(t));
    expect(back.refusal).toBeNull();
    // The restarted Redis starts empty: this is its first request of the tenant.
    expect(back.headers?.ratelimit).toBe('"requests";r=9;t=1');
    expect(await client.exists(limiterKeys('qe:', t.id, '202606').requests)).toBe(1);
    const modeLines = lines.filter((x) => x.msg.startsWith('limiter:'));
    expect(modeLines.map((x) => [x.level, x.msg])).toEqual([
      [40, `limiter: Redis unavailable, failMode ${failMode} in force`],
      [30, 'limiter: Redis is back, shared limits in force'],
    ]);
  });

  it('a timeout costs one wait; the next decision does not wait again', async () => {
    client = await connectTest(server.url, TIMEOUT_MS);
    const l = await limiter('closed');
    const t = tenant();
    expect((await l.admit(input(t))).refusal).toBeNull();
    server.pause();
    const first = l.admit(input(t));
    expect(first).toBeInstanceOf(Promise);
    expect((await first).refusal?.code).toBe('limiter_unavailable');
    expect(l.mode()).toBe('closed');
    const second = l.admit(input(t));
    expect(second).not.toBeInstanceOf(Promise);
    expect((second as Admission).refusal?.code).toBe('limiter_unavailable');
    server.resume();
    await waitFor(() => l.mode() === 'redis', 10_000, 'recovery');
    expect((await l.admit(input(t))).refusal).toBeNull();
  });

  it('failMode local divides the limit by the live instances it learnt while Redis was up', async () => {
    client = await connectTest(server.url, TIMEOUT_MS);
    const a = await limiter('local');
    await limiter('local');
    await waitFor(() => a.liveInstances() === 2, 10_000, 'two live instances');
    const t = tenant();
    await server.kill();
    const results: (string | null)[] = [];
    for (let i = 0; i < 7; i++) results.push((await a.admit(input(t))).refusal?.code ?? null);
    expect(a.mode()).toBe('local');
    // Burst 10 across 2 instances: 5 here, then refused like any rate limit.
    expect(results).toEqual([null, null, null, null, null, 'rate_limited', 'rate_limited']);
    expect(a.liveInstances()).toBe(2);
  });
});

describe('limiter without Redis', () => {
  it('uses the memory store when no url or cluster is configured', async () => {
    const l = createLimiter({ url: null, cluster: [], keyPrefix: 'qe:', timeoutMs: 50, failMode: 'closed' }, { log: pino({ level: 'silent' }) });
    await l.start();
    expect(l.mode()).toBe('memory');
    const a = l.admit(input(tenant()));
    expect(a).not.toBeInstanceOf(Promise);
    expect((a as Admission).refusal).toBeNull();
    await l.close();
  });
});
