/**
 * The epoch key: the first edge writes it, a vanished key is noticed by every edge once, and
 * exactly one of them writes the new epoch (and so re-seeds). Shared Redis, a prefix of its own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { RedisEpoch, type EpochChange } from '../../src/redis/epoch.js';
import { epochKey } from '../../src/redis/keys.js';
import { createLogger } from '../../src/observability/log.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';

const log = createLogger('silent');
const prefix = uniquePrefix();
let client: Redis;

beforeAll(async () => {
  client = await connectTest(SHARED_REDIS_URL, 1000);
});

afterAll(async () => {
  await flushPrefix(client, prefix);
  client.disconnect();
});

describe('redis epoch', () => {
  it('is written once at the first start, and a vanished key is noticed by each edge once, one of them writing the new epoch', async () => {
    const edges = [new RedisEpoch(client, prefix, log, 60_000), new RedisEpoch(client, prefix, log, 60_000)];
    const seen: EpochChange[][] = [[], []];
    edges.forEach((e, i) => {
      e.onChange((c) => {
        seen[i]!.push(c);
      });
    });
    try {
      await edges[0]!.start();
      await edges[1]!.start();
      const first = await client.get(epochKey(prefix));
      expect(seen[0]).toEqual([{ previous: null, current: first, won: true }]);
      expect(seen[1]).toEqual([{ previous: null, current: first, won: false }]);
      // Nothing changed: nothing to tell.
      await Promise.all(edges.map((e) => e.check()));
      expect(seen.map((s) => s.length)).toEqual([1, 1]);

      await client.del(epochKey(prefix));
      await Promise.all(edges.map((e) => e.check()));
      const second = await client.get(epochKey(prefix));
      expect(second).not.toBe(first);
      const changes = seen.map((s) => s[1]);
      expect(changes.map((c) => c?.current)).toEqual([second, second]);
      expect(changes.map((c) => c?.previous)).toEqual([first, first]);
      expect(changes.filter((c) => c?.won)).toHaveLength(1);
      expect(edges.map((e) => e.emptied)).toEqual([1, 1]);
    } finally {
      for (const e of edges) e.close();
    }
  });
});
