import { describe, expect, it } from 'vitest';
import { createBrokerPools } from '../../src/upstream/pools.js';
import { testConfig } from '../helpers/edge.js';

describe('broker pools', () => {
  it('retain() closes the pools of brokers no longer listed and keeps the others', async () => {
    const pools = createBrokerPools(testConfig(['http://127.0.0.1:1']).upstream);
    const [a, b] = ['http://127.0.0.1:1', 'http://127.0.0.1:2'];
    const kept = pools.get(a, false);
    const dropped = [pools.get(b, false), pools.get(b, true)];
    pools.retain(new Set([a]));
    expect(dropped.map((p) => p.closed)).toEqual([true, true]);
    expect(pools.get(a, false)).toBe(kept);
    expect(kept.closed).toBe(false);
    expect(pools.get(b, false)).not.toBe(dropped[0]);
    await pools.close();
  });
});
