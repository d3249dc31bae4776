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

  it('enter() gives each tenant its share of one broker’s pool, counted per broker and per tenant', async () => {
    const pools = createBrokerPools(testConfig(['http://127.0.0.1:1'], { upstream: { connections: 10, tenantShare: 0.3 } }).upstream);
    const [a, b] = ['http://127.0.0.1:1', 'http://127.0.0.1:2'];
    expect(pools.tenantCap).toBe(3);
    expect([1, 2, 3, 4].map(() => pools.enter(a, 't1'))).toEqual([true, true, true, false]);
    // Another tenant on the same broker, and the same tenant on another broker, have their own.
    expect(pools.enter(a, 't2')).toBe(true);
    expect(pools.enter(b, 't1')).toBe(true);
    pools.leave(a, 't1');
    expect([pools.enter(a, 't1'), pools.enter(a, 't1')]).toEqual([true, false]);
    await pools.close();
  });

  it('a share below one connection still lets every tenant send one request', async () => {
    const pools = createBrokerPools(testConfig(['http://127.0.0.1:1'], { upstream: { connections: 2, tenantShare: 0.1 } }).upstream);
    expect(pools.tenantCap).toBe(1);
    expect([pools.enter('http://127.0.0.1:1', 't1'), pools.enter('http://127.0.0.1:1', 't1')]).toEqual([true, false]);
    await pools.close();
  });
});
