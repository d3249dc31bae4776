/**
 * `copyUsageToStore`: today's Redis usage (day hashes written by the Redis usage store) lands in the
 * ledger hour by hour, and a second copy adds nothing. Shared Redis (a prefix of its own) and
 * shared PostgreSQL (a schema of its own).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { copyUsageToStore } from '../../src/metering/copy.js';
import { HOUR_MS, UsageCounts } from '../../src/metering/counts.js';
import { LedgerUsageStore } from '../../src/metering/ledger.js';
import { createUsageStore, type UsageStore } from '../../src/metering/store.js';
import { createLogger } from '../../src/observability/log.js';
import { Store } from '../../src/store/connection.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';
import { waitFor } from '../helpers/wait.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';

const target = uniqueStore();
// A prefix with a glob character: the copy's SCAN must match it literally.
const prefix = `${uniquePrefix()}[x]`;
let client: Redis;
let redisUsage: UsageStore;
let store: Store;

beforeAll(async () => {
  client = await connectTest(SHARED_REDIS_URL, 2000);
  redisUsage = createUsageStore(client, prefix);
  store = new Store(target, createLogger('silent'));
  await store.migrate();
});

afterAll(async () => {
  await redisUsage.close();
  await flushPrefix(client, prefix.replace('[', '\\[').replace(']', '\\]'));
  client.disconnect();
  await store.close();
  await dropStore(target);
});

const DAY1 = Date.UTC(2026, 10, 30, 22, 0, 0);
const DAY2 = Date.UTC(2026, 11, 1, 3, 0, 0);

function counts(requests: number, refused = 0): UsageCounts {
  return Object.assign(
    new UsageCounts(),
    { requests, messagesPushed: 2 * requests, egressBytes: 100 },
    refused ? { refusals: { quota_exceeded: refused } } : {},
  );
}

describe('copyUsageToStore', () => {
  it('copies every tenant-hour Redis holds into the ledger, once', async () => {
    // The usage store's own connection may not be up yet (no offline queue): a batch is safe to retry.
    const applied = (u: UsageStore, batch: Parameters<UsageStore['apply']>[2]) =>
      waitFor(
        () =>
          u.apply('edge-1', 1, batch).then(
            () => true,
            () => false,
          ),
        5000,
        'the batch applied in Redis',
      );
    await applied(
      redisUsage,
      new Map([
        [
          'acme',
          new Map([
            [DAY1, counts(3, 1)],
            [DAY1 + HOUR_MS, counts(4)],
            [DAY2, counts(5)],
          ]),
        ],
        ['beta', new Map([[DAY2, counts(7)]])],
      ]),
    );
    // Another prefix's usage is not copied.
    const other = createUsageStore(client, `${prefix}other:`);
    await applied(other, new Map([['acme', new Map([[DAY1, counts(100)]])]]));
    await other.close();

    const first = await copyUsageToStore(client, prefix, store);
    expect(first).toEqual({ alreadyCopied: false, dayHashes: 3, hourRows: 4 });
    expect(await copyUsageToStore(client, prefix, store)).toEqual({ alreadyCopied: true, dayHashes: 0, hourRows: 0 });

    const ledger = new LedgerUsageStore(store);
    const range = [DAY1 - 24 * HOUR_MS, DAY2 + 24 * HOUR_MS] as const;
    expect(await ledger.read('acme', ...range)).toEqual(await redisUsage.read('acme', ...range));
    expect(await ledger.read('beta', ...range)).toEqual(await redisUsage.read('beta', ...range));
    expect((await ledger.read('acme', ...range)).get(DAY1)).toMatchObject({
      requests: 3,
      messagesPushed: 6,
      egressBytes: 100,
      refusals: { quota_exceeded: 1 },
    });

    // A week on, an edge's first flush sweeps the rows of processes long gone, but not the copy's
    // marker: a second migrate still adds nothing.
    await store.query("UPDATE usage_flush SET at = now() - interval '8 days'");
    await ledger.apply('a-new-process', 1, new Map([['beta', new Map([[DAY2, counts(1)]])]]));
    expect(await copyUsageToStore(client, prefix, store)).toEqual({ alreadyCopied: true, dayHashes: 0, hourRows: 0 });
    expect((await ledger.read('acme', ...range)).get(DAY1)).toMatchObject({ requests: 3 });
  });
});
