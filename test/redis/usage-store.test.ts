/**
 * The Redis usage store, on a single Redis and on a Redis Cluster: a flush spans tenants (and on
 * a Cluster, slots), and a retried batch whose apply reached only some slots is completed, not
 * doubled.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster, Redis } from 'ioredis';
import { HOUR_MS, UsageCounts } from '../../src/metering/counts.js';
import { createUsageStore, type UsageBatch, type UsageStore } from '../../src/metering/store.js';
import { usageDayKey } from '../../src/redis/keys.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { RedisCluster } from '../helpers/redis-cluster.js';

const HOUR = Date.parse('2026-06-01T10:00:00Z');

function counts(requests: number, pushed: number): UsageCounts {
  const c = new UsageCounts();
  c.requests = requests;
  c.messagesPushed = pushed;
  return c;
}

function batch(entries: Array<[string, UsageCounts]>): UsageBatch {
  return new Map(entries.map(([tenant, c]) => [tenant, new Map([[HOUR, c]])]));
}

describe.each(['redis', 'cluster'] as const)('usage store (%s)', (kind) => {
  const prefix = uniquePrefix();
  let client: Redis | Cluster;
  let cluster: RedisCluster | undefined;
  let store: UsageStore;

  beforeAll(async () => {
    if (kind === 'cluster') {
      cluster = await RedisCluster.start();
      client = await cluster.client();
    } else {
      client = await connectTest(SHARED_REDIS_URL, 2000);
    }
    store = createUsageStore(client, prefix);
    // The store opens a connection of its own, without an offline queue: wait until it answers.
    await waitFor(
      () =>
        store.read('nobody', HOUR, HOUR + 1).then(
          () => true,
          () => false,
        ),
      10_000,
      'the usage store connection',
    );
  }, 40_000);
  afterAll(async () => {
    await store?.close();
    if (cluster) await cluster.stop();
    else if (client) {
      await flushPrefix(client as Redis, prefix);
      client.disconnect();
    }
  });

  const read = async (tenant: string): Promise<[number, number]> => {
    const c = (await store.read(tenant, HOUR, HOUR + HOUR_MS)).get(HOUR);
    return [c?.requests ?? 0, c?.messagesPushed ?? 0];
  };

  it('applies a batch that spans tenants once; a retry of it adds nothing', async () => {
    const tenants = Array.from({ length: 12 }, (_, i) => `ten${i}`);
    if (cluster) {
      const owners = new Set(await Promise.all(tenants.map((t) => cluster!.masterOf(usageDayKey(prefix, t, '20260601')))));
      expect(owners.size).toBe(3);
    }
    const b = batch(tenants.map((t, i) => [t, counts(i + 1, 10 * (i + 1))]));
    await store.apply('inst-a', 1, b);
    await store.apply('inst-a', 1, b);
    // Another instance's batches have their own sequence.
    await store.apply('inst-b', 1, batch([['ten0', counts(5, 0)]]));
    expect(await Promise.all(tenants.map(read))).toEqual(tenants.map((_, i) => [i + 1 + (i === 0 ? 5 : 0), 10 * (i + 1)]));
  });

  it('completes a batch whose first try reached only some tenants, without doubling those', async () => {
    // The first try of batch 7 landed for "x" only (the call for y's slot failed); the retry carries both.
    await store.apply('inst-c', 7, batch([['x', counts(3, 30)]]));
    await store.apply(
      'inst-c',
      7,
      batch([
        ['x', counts(3, 30)],
        ['y', counts(4, 40)],
      ]),
    );
    expect([await read('x'), await read('y')]).toEqual([
      [3, 30],
      [4, 40],
    ]);
    // The next batch applies to both again.
    await store.apply(
      'inst-c',
      8,
      batch([
        ['x', counts(1, 0)],
        ['y', counts(1, 0)],
      ]),
    );
    expect([await read('x'), await read('y')]).toEqual([
      [4, 30],
      [5, 40],
    ]);
  });
});
