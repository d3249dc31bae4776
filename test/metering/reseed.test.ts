/**
 * Raising month counters to the ledger's totals: a lost counter gets its total (with the month
 * counter's expiry), one already above it keeps its value, and running it again changes nothing.
 * Shared Redis, a prefix of its own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { writeMonthCounters } from '../../src/metering/reseed.js';
import { limiterKeys } from '../../src/redis/keys.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';

const prefix = uniquePrefix();
let client: Redis;

beforeAll(async () => {
  client = await connectTest(SHARED_REDIS_URL, 2000);
});

afterAll(async () => {
  await flushPrefix(client, prefix);
  client.disconnect();
});

const NOW = Date.UTC(2026, 11, 6, 12, 0, 0);

describe('writeMonthCounters', () => {
  it('raises each counter to its ledger total, never lowers one, and is safe to repeat', async () => {
    const lost = limiterKeys(prefix, 'lost', '202612');
    const kept = limiterKeys(prefix, 'kept', '202612');
    await client.set(kept.monthMessages, 50);
    await client.set(lost.monthMessages, 2);
    const totals = new Map([
      ['lost', { messages: 40, ingressBytes: 4000 }],
      ['kept', { messages: 30, ingressBytes: 3000 }],
      ['idle', { messages: 0, ingressBytes: 0 }],
    ]);
    expect(await writeMonthCounters(client, prefix, totals, NOW)).toBe(2);
    expect(await client.mget(lost.monthMessages, lost.monthBytes, kept.monthMessages, kept.monthBytes)).toEqual(['40', '4000', '50', '3000']);
    // Expires a day after the month ends, like the limiter's own counters.
    const ttl = await client.pttl(lost.monthMessages);
    expect(ttl).toBeGreaterThan(Date.UTC(2027, 0, 2) - NOW - 60_000);
    expect(ttl).toBeLessThanOrEqual(Date.UTC(2027, 0, 2) - NOW);
    expect(await writeMonthCounters(client, prefix, totals, NOW)).toBe(0);
    expect(await client.get(lost.monthMessages)).toBe('40');
    expect(await client.exists(limiterKeys(prefix, 'idle', '202612').monthMessages)).toBe(0);
  });
});
