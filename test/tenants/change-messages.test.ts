/**
 * Change messages name the tenant and the directory version: a peer places that tenant alone
 * (its other tenants keep their objects), and after a missed message reads everything again.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/observability/log.js';
import { directoryKeys } from '../../src/redis/keys.js';
import { createTenantStore, type DirectoryChange, type TenantStore } from '../../src/tenants/store.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const LIMITS = { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1048576, maxBatch: 1000 };
const PLAN = { features: [], limits: LIMITS, quotas: { messagesPerMonth: 1000, ingressBytesPerMonth: 10000 }, storageBytes: 1000 };
const prefix = uniquePrefix();
const k = directoryKeys(prefix);
const tenants: Record<string, unknown> = {};
for (let i = 0; i < 50; i++) tenants[`t${i}`] = { plan: 'free', hosts: [`t${i}.example.com`], brokers: ['http://10.0.0.1:6632'], tenancyAwareBrokers: true };
const config = parseConfig({ redis: { keyPrefix: prefix }, plans: { free: PLAN }, tenants });

let client: Redis;
let clientB: Redis;
let a: TenantStore;
let b: TenantStore;

beforeAll(async () => {
  client = await connectTest(SHARED_REDIS_URL);
  clientB = await connectTest(SHARED_REDIS_URL);
  // Long periodic checks: what these tests see arrives by pub/sub.
  a = await createTenantStore(config, { log: silentLogger(), redis: client, refreshMs: 60_000 });
  b = await createTenantStore(config, { log: silentLogger(), redis: clientB, refreshMs: 60_000 });
});

afterAll(async () => {
  await Promise.all([a.close(), b.close()]);
  await flushPrefix(client, prefix);
  client.disconnect();
  clientB.disconnect();
});

describe('change messages', () => {
  it('a suspension on one instance is placed alone on the other: one tenant changed, the rest keep their objects', async () => {
    const changes: DirectoryChange[] = [];
    const off = b.onChange((c) => changes.push(c));
    const t1 = b.byId('t1');
    expect(await a.setStatus('t0', 'suspended')).toEqual({ ok: true });
    await waitFor(() => b.byId('t0')?.status === 'suspended', 2000, 'the suspension on b');
    off();
    expect(changes.map((c) => [...c.tenants])).toEqual([['t0']]);
    expect(changes[0]!.brokers).toBeNull();
    expect(b.byId('t1')).toBe(t1);
  });

  it('after a missed message (a version skipped) the other instance reads everything', async () => {
    // A write that counted the version but whose message was lost, then an ordinary one.
    await client
      .multi()
      .set(k.tenant('lost'), JSON.stringify({ plan: 'free', hosts: ['lost.example.com'], brokers: ['http://10.0.0.2:1'] }))
      .sadd(k.tenants, 'lost')
      .incr(k.version)
      .exec();
    expect(await a.setStatus('t2', 'suspended')).toEqual({ ok: true });
    await waitFor(() => b.byId('lost') !== undefined && b.byId('t2')?.status === 'suspended', 2000, 'both writes on b');
    // a wrote after the gap too: it read everything as well.
    expect(a.byId('lost')?.hosts).toEqual(['lost.example.com']);
  });
});
