import { describe, expect, it } from 'vitest';
import { LeaseMap } from '../../src/upstream/leases.js';

function clock(start = 1_000) {
  const c = { now: start, fn: () => c.now };
  return c;
}

describe('LeaseMap', () => {
  it('remembers the broker of a lease', () => {
    const m = new LeaseMap();
    m.learn('L1', 'http://b1:6632');
    m.learn('L2', 'http://b2:6632');
    expect(m.brokerFor('L1')).toBe('http://b1:6632');
    expect(m.brokerFor('L2')).toBe('http://b2:6632');
    expect(m.brokerFor('L3')).toBeUndefined();
  });

  it('forgets a lease after its TTL, and a new learn refreshes it', () => {
    const c = clock();
    const m = new LeaseMap({ ttlMs: 100, clock: c.fn });
    m.learn('L1', 'http://b1');
    c.now += 99;
    expect(m.brokerFor('L1')).toBe('http://b1');
    m.learn('L1', 'http://b2');
    c.now += 99;
    expect(m.brokerFor('L1')).toBe('http://b2');
    c.now += 1;
    expect(m.brokerFor('L1')).toBeUndefined();
    expect(m.size).toBe(0);
  });

  it('defaults to a 10 minute TTL', () => {
    const c = clock();
    const m = new LeaseMap({ clock: c.fn });
    m.learn('L1', 'http://b1');
    c.now += 10 * 60 * 1000 - 1;
    expect(m.brokerFor('L1')).toBe('http://b1');
    c.now += 1;
    expect(m.brokerFor('L1')).toBeUndefined();
  });

  it('evicts the oldest entry first when full', () => {
    const m = new LeaseMap({ maxEntries: 3 });
    for (const id of ['L1', 'L2', 'L3']) m.learn(id, `http://${id}`);
    m.learn('L1', 'http://again'); // refreshed: L2 is now the oldest
    m.learn('L4', 'http://L4');
    expect(m.size).toBe(3);
    expect(m.brokerFor('L2')).toBeUndefined();
    expect(m.brokerFor('L1')).toBe('http://again');
    expect(m.brokerFor('L3')).toBe('http://L3');
    expect(m.brokerFor('L4')).toBe('http://L4');
  });

  it('sweeps expired entries as new ones arrive, without timers', () => {
    const c = clock();
    const m = new LeaseMap({ ttlMs: 50, clock: c.fn });
    for (let i = 0; i < 1000; i++) m.learn(`old-${i}`, 'http://b1');
    c.now += 50;
    m.learn('new', 'http://b2');
    expect(m.size).toBe(1);
    expect(m.brokerFor('new')).toBe('http://b2');
  });

  it('stays bounded under a stream of distinct leases', () => {
    const m = new LeaseMap({ maxEntries: 100 });
    for (let i = 0; i < 10_000; i++) m.learn(`L${i}`, 'http://b');
    expect(m.size).toBe(100);
    expect(m.brokerFor('L9899')).toBeUndefined();
    expect(m.brokerFor('L9900')).toBe('http://b');
  });
});
