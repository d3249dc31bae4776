/**
 * One tenant's bad plan must not put every tenant into fail mode: a script error answers for the
 * request that caused it; only a Redis that does not answer trips the breaker (real Redis).
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { createLimiter, type AdmitInput, type EdgeLimiter } from '../../src/limits/limiter.js';
import { silentLogger } from '../../src/observability/log.js';
import { compilePlan, compileTenant, type Limits, type Tenant } from '../../src/tenants/model.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';

const GOOD: Limits = {
  requestsPerSec: 100,
  requestBurst: 100,
  messagesPerSec: 1000,
  messageBurst: 1000,
  parkedPolls: 10,
  maxPayloadBytes: 1 << 20,
  maxBatch: 1000,
};
let seq = 0;

/** Built without the config schema, as a record that slipped past validation would be. */
function tenant(limits: Partial<Limits> = {}): Tenant {
  const plan = compilePlan('p', { features: [], limits: { ...GOOD, ...limits }, quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 }, storageBytes: 0 });
  return compileTenant(
    `se${++seq}-${process.pid}`,
    { status: 'active', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null },
    plan,
  );
}

const input = (t: Tenant): AdmitInput => ({ tenant: t, messages: 1, ingressBytes: 10, parkedPoll: false });

describe.each(['closed', 'open', 'local'] as const)('a script error in failMode %s', (failMode) => {
  const prefix = uniquePrefix();
  let client: Redis;
  let limiter: EdgeLimiter;

  beforeAll(async () => {
    // Generous timeouts: this suite is about script errors, and a slow moment of a loaded machine
    // must not look like an unavailable Redis.
    client = await connectTest(SHARED_REDIS_URL, 2000);
    const cfg: RawConfig['redis'] = { url: null, cluster: [], keyPrefix: prefix, timeoutMs: 2000, failMode };
    limiter = createLimiter(cfg, { log: silentLogger(), redis: client, heartbeatMs: 60_000 });
    await limiter.start();
  });
  afterAll(async () => {
    await limiter.close();
    await flushPrefix(client, prefix);
    client.disconnect();
  });

  it('answers for the bad tenant only; other tenants keep shared limits in Redis', async () => {
    const bad = tenant({ requestsPerSec: 1e-300 });
    const good = tenant();
    const refusedBad = await limiter.admit(input(bad));
    if (failMode === 'closed') expect(refusedBad.refusal?.code).toBe('limiter_unavailable');
    else expect(refusedBad.refusal).toBeNull();
    expect(limiter.mode()).toBe('redis');
    const admittedGood = await limiter.admit(input(good));
    expect(admittedGood.refusal).toBeNull();
    // Decided by Redis, not by a fail mode: the shared RateLimit headers are there.
    expect(admittedGood.headers).not.toBeNull();
  });

  it.each([
    ['slowest rate, largest burst', { requestsPerSec: 0.001, requestBurst: 1e9, messagesPerSec: 0.001, messageBurst: 1e9 }],
    ['fastest rate, smallest burst', { requestsPerSec: 1e9, requestBurst: 1, messagesPerSec: 1e9, messageBurst: 1 }],
  ])('the extremes the schema accepts run in the script (%s)', async (_name, limits) => {
    const t = tenant(limits);
    for (let i = 0; i < 3; i++) {
      const a = await limiter.admit(input(t));
      expect(a.headers).not.toBeNull();
    }
    expect(limiter.mode()).toBe('redis');
  });
});
