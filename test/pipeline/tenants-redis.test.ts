/**
 * Tenant records in Redis through the proxy: a second tenant store on the same prefix (as the
 * admin API will be) records storage, suspends, and rewrites plans; both proxy instances follow
 * within a second.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { createTenantStore, type TenantStore } from '../../src/tenants/store.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin as adminCall } from '../admin/admin-call.js';

/** Generous: on a loaded CI machine the 50 ms default would trip the breaker and test fail modes instead. */
const REDIS_TIMEOUT_MS = 1000;
const prefix = uniquePrefix();
let broker: BrokerDouble;
let redis: Redis;
let edge: EdgeHarness;
let twin: EdgeHarness;
let admin: TenantStore;
let t: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  redis = await connectTest(SHARED_REDIS_URL);
  const config = testConfig([broker.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: REDIS_TIMEOUT_MS },
    upstream: { healthIntervalMs: 1000, healthTimeoutMs: 2000, downAfter: 3 },
    server: { admin: { token: ADMIN_TOKEN } },
    plans: { test: { ...TEST_PLAN, storageBytes: 1000 } },
    // The double registers the broker contract's routes beyond 0.15.1 (retry, replay).
    tenants: { acme: { brokerVersion: 'contract' } },
  });
  edge = await startEdge(config);
  twin = await startEdge(config);
  admin = await createTenantStore(config, { log: silentLogger() });
  t = await token({ roles: ['read-write'], tenant: 'acme' });
});
afterAll(async () => {
  await admin.close();
  await Promise.all([edge.close(), twin.close()]);
  await broker.close();
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

const push = (h: EdgeHarness) => call(h, 'POST', '/api/v1/push', { token: t, body: { items: [{ queue: 'sq', payload: 1 }] } });
const pop = (h: EdgeHarness) => call(h, 'GET', '/api/v1/pop/queue/sq', { token: t });

/**
 * Waits until an instance's own snapshot holds `bytes` of storage for acme, as its admin API shows
 * it: the signal that a change which should NOT alter the proxy's answer has arrived.
 */
async function storageSeen(h: EdgeHarness, bytes: number): Promise<void> {
  await waitFor(async () => (await adminCall(h, 'GET', '/admin/v1/tenants/acme')).json?.storage?.usedBytes === bytes, 3000, `storage ${bytes} in the snapshot`);
}

/** Polls `req` until `done(reply)`; returns the ms it took (fails after 3 s). */
async function msUntil(req: () => Promise<Reply>, done: (r: Reply) => boolean): Promise<number> {
  const start = Date.now();
  await waitFor(async () => done(await req()), 3000, 'the change to reach the proxy');
  return Date.now() - start;
}

describe('storage quota (recorded by the control plane)', () => {
  it('at or over the plan: pushes and pushing transactions 403 storage_quota_exceeded, pop and ack still work; released below 90%', async () => {
    expect((await push(edge)).status).toBe(201);
    expect((await admin.setStorageUsed('acme', 1000)).ok).toBe(true);
    await msUntil(
      () => push(edge),
      (r) => r.status === 403,
    );
    await msUntil(
      () => push(twin),
      (r) => r.status === 403,
    );

    const before = forwarded(broker).length;
    const refused = await push(edge);
    expect(refused.json).toEqual({ error: expect.any(String), code: 'storage_quota_exceeded' });
    const txn = await call(edge, 'POST', '/api/v1/transaction', { token: t, body: { operations: [{ type: 'push', items: [{ queue: 'sq', payload: 2 }] }] } });
    expect(txn.json).toMatchObject({ code: 'storage_quota_exceeded' });
    // Routes that put messages back into storage (retry, DLQ replay) are gated too, though their bodies are streamed.
    const replay = await call(edge, 'POST', '/api/v1/dlq/d1/replay', { token: t, body: {} });
    expect(replay.json).toMatchObject({ code: 'storage_quota_exceeded' });
    const retry = await call(edge, 'POST', '/api/v1/messages/p1/t1/retry', { token: t, body: {} });
    expect(retry.json).toMatchObject({ code: 'storage_quota_exceeded' });
    expect(forwarded(broker).length).toBe(before);

    // Draining keeps working: pop the message pushed before the block, ack it.
    const popped = await pop(edge);
    expect(popped.status).toBe(200);
    const body = popped.json as { leaseId: string; messages: { transactionId: string; partitionId: string }[] };
    const m = body.messages[0]!;
    const ack = await call(edge, 'POST', '/api/v1/ack', {
      token: t,
      body: { transactionId: m.transactionId, partitionId: m.partitionId, leaseId: body.leaseId },
    });
    expect(ack.status).toBe(200);

    // Hysteresis: 95% still blocks, below 90% releases.
    await admin.setStorageUsed('acme', 950);
    await storageSeen(edge, 950);
    expect((await push(edge)).status).toBe(403);
    await admin.setStorageUsed('acme', 899);
    await msUntil(
      () => push(edge),
      (r) => r.status === 201,
    );
    await msUntil(
      () => push(twin),
      (r) => r.status === 201,
    );
    // The same 95% from an unblocked state does not block: only reaching 100% does.
    await admin.setStorageUsed('acme', 950);
    await storageSeen(edge, 950);
    expect((await push(edge)).status).toBe(201);
    expect(admin.storageBlocked('acme')).toBe(false);
  });
});

describe('hot changes', () => {
  it('a suspension written by another instance reaches the proxy within a second; resume likewise', async () => {
    expect((await pop(twin)).status).not.toBe(403);
    await admin.setStatus('acme', 'suspended');
    const ms = await msUntil(
      () => pop(twin),
      (r) => (r.json as { code?: string } | undefined)?.code === 'cluster_suspended',
    );
    expect(ms).toBeLessThan(1000);
    const r = await push(edge);
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ error: expect.any(String), code: 'cluster_suspended' });
    await admin.setStatus('acme', 'active');
    expect(
      await msUntil(
        () => pop(edge),
        (x) => x.status !== 403,
      ),
    ).toBeLessThan(1000);
  });

  it('a plan record in Redis changes the limits in force on both instances', async () => {
    const first = await pop(edge);
    expect(first.headers['ratelimit-policy']).toBe('"requests";q=100000;w=1');
    expect((await admin.putPlan('test', { ...TEST_PLAN, storageBytes: 1000, limits: { ...TEST_PLAN.limits, requestsPerSec: 1, requestBurst: 2 } })).ok).toBe(
      true,
    );
    await msUntil(
      () => pop(twin),
      (r) => r.headers['ratelimit-policy'] === '"requests";q=2;w=2',
    );
    const replies = [await pop(edge), await pop(twin), await pop(edge)];
    expect(replies.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(1);
    const refused = replies.find((r) => r.status === 429)!;
    expect(refused.json).toMatchObject({ code: 'rate_limited' });
    expect(refused.headers['retry-after']).toBe('1');
  });
});
