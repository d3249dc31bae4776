import { describe, expect, it } from 'vitest';

import { createBrokerPools, mayTake } from '../../src/upstream/pools.js';
import { testConfig } from '../helpers/edge.js';

describe('broker pools', () => {
  it('drop() closes the pools of the brokers named and keeps the others', async () => {
    const pools = createBrokerPools(testConfig(['http://127.0.0.1:1']).upstream);
    const [a, b] = ['http://127.0.0.1:1', 'http://127.0.0.1:2'];
    const kept = pools.get(a, false);
    const dropped = [pools.get(b, false), pools.get(b, true)];
    pools.drop([b, 'http://127.0.0.1:3']);
    expect(dropped.map((p) => p.closed)).toEqual([true, true]);
    expect(pools.get(a, false)).toBe(kept);
    expect(kept.closed).toBe(false);
    expect(pools.get(b, false)).not.toBe(dropped[0]);
    await pools.close();
  });

  it('enter() gives each tenant its share of one broker’s pool at once, counted per broker and per tenant; leave() hands a place to the first waiting', async () => {
    const pools = createBrokerPools(testConfig(['http://127.0.0.1:1'], { upstream: { connections: 10, tenantShare: 0.3 } }).upstream);
    const [a, b] = ['http://127.0.0.1:1', 'http://127.0.0.1:2'];
    expect(pools.tenantCap).toBe(3);
    expect([1, 2, 3].map(() => pools.enter(a, 't1'))).toEqual([true, true, true]);
    const handed: number[] = [];
    const waiting = [1, 2].map((i) => (pools.enter(a, 't1') as Promise<boolean>).then((ok) => ok && handed.push(i)));
    // Another tenant on the same broker, and the same tenant on another broker, have their own.
    expect(pools.enter(a, 't2')).toBe(true);
    expect(pools.enter(b, 't1')).toBe(true);
    pools.leave(a, 't1');
    pools.leave(a, 't1');
    await Promise.all(waiting);
    expect(handed).toEqual([1, 2]);
    // Handed over, not freed: the tenant still has its share in flight.
    expect(pools.enter(a, 't1')).toBeInstanceOf(Promise);
    await pools.close();
  });

  it('refuses at once when the tenant already has `connections` waiting, and a wait longer than requestTimeoutMs', async () => {
    const pools = createBrokerPools(testConfig(['http://127.0.0.1:1'], { upstream: { connections: 2, tenantShare: 0.1, requestTimeoutMs: 50 } }).upstream);
    const a = 'http://127.0.0.1:1';
    // A share below one connection is still one request.
    expect(pools.tenantCap).toBe(1);
    expect(pools.enter(a, 't1')).toBe(true);
    const waits = [pools.enter(a, 't1'), pools.enter(a, 't1')];
    expect(pools.enter(a, 't1')).toBe(false);
    expect(await Promise.all(waits)).toEqual([false, false]);
    // The timed-out waits left the queue: a place given back is free again.
    pools.leave(a, 't1');
    expect(pools.enter(a, 't1')).toBe(true);
    await pools.close();
  });

  it('keeps the reserved places for tenants with few in flight, and hands a place back to the waiting tenant with the fewest', async () => {
    // 8 places, each tenant at most 4, the last 2 only for tenants with fewer than 2 in flight.
    const pools = createBrokerPools(
      testConfig(['http://127.0.0.1:1'], { upstream: { connections: 8, tenantShare: 0.5, reservedShare: 0.25, reservedFor: 2 } }).upstream,
    );
    const a = 'http://127.0.0.1:1';
    expect([1, 2, 3, 4].map(() => pools.enter(a, 'h1'))).toEqual([true, true, true, true]);
    expect([1, 2].map(() => pools.enter(a, 'h2'))).toEqual([true, true]);
    // 6 in flight: h2 holds 2, too many for the reserve.
    const h2Waits = pools.enter(a, 'h2') as Promise<boolean>;
    expect(h2Waits).toBeInstanceOf(Promise);
    expect([pools.enter(a, 'l1'), pools.enter(a, 'l2')]).toEqual([true, true]);
    // Full: even a tenant with none in flight waits now.
    const l3Waits = pools.enter(a, 'l3') as Promise<boolean>;
    expect(l3Waits).toBeInstanceOf(Promise);
    // A place given back goes to l3 (none in flight), not to h2 (2), which waited longer.
    pools.leave(a, 'h1');
    expect(await l3Waits).toBe(true);
    // h2 gets one once fewer than the 6 unreserved places are in flight.
    let h2Entered = false;
    void h2Waits.then((ok) => (h2Entered = ok));
    pools.leave(a, 'h1');
    pools.leave(a, 'l1');
    await Promise.resolve();
    expect(h2Entered).toBe(false);
    pools.leave(a, 'l2');
    expect(await h2Waits).toBe(true);
    await pools.close();
  });

  it('mayTake: below the share and the unreserved places; in the reserve only with fewer than reservedFor; never past connections', () => {
    const rule = { cap: 32, connections: 128, reserved: 32, reservedFor: 4 };
    const cases: [held: number, inflight: number, may: boolean][] = [
      [31, 95, true],
      [32, 0, false],
      [4, 96, false],
      [3, 96, true],
      [3, 127, true],
      [0, 128, false],
    ];
    for (const [held, inflight, may] of cases) expect(mayTake({ inflight: held }, { inflight }, rule), `${held} held, ${inflight} in flight`).toBe(may);
  });
});
