import { describe, expect, it } from 'vitest';
import { ExpiringMap } from '../../src/cache/expiring-map.js';

describe('ExpiringMap', () => {
  it('serves an entry until its expiry, exclusive, and drops it when read after', () => {
    const m = new ExpiringMap<string, number>(10);
    m.set('a', 1, 100, 0);
    expect(m.get('a', 99)).toBe(1);
    expect(m.get('a', 100)).toBeUndefined();
    expect(m.size).toBe(0);
  });

  it('evicts the oldest insert at max; set() of a present key makes it the newest', () => {
    const m = new ExpiringMap<string, number>(2);
    m.set('a', 1, 1000, 0);
    m.set('b', 2, 1000, 0);
    m.set('a', 3, 1000, 0);
    m.set('c', 4, 1000, 0);
    expect([m.get('a', 1), m.get('b', 1), m.get('c', 1)]).toEqual([3, undefined, 4]);
  });

  it('with touchOnGet, a read makes an entry the newest (least recently used goes first)', () => {
    const lru = new ExpiringMap<string, number>(2, { touchOnGet: true });
    const fifo = new ExpiringMap<string, number>(2);
    for (const m of [lru, fifo]) {
      m.set('a', 1, 1000, 0);
      m.set('b', 2, 1000, 0);
      m.get('a', 1);
      m.set('c', 3, 1000, 0);
    }
    expect([lru.get('a', 1), lru.get('b', 1)]).toEqual([1, undefined]);
    expect([fifo.get('a', 1), fifo.get('b', 1)]).toEqual([undefined, 2]);
  });

  it('with touchOnGet, a read moves only an entry of the older half: the newer half is far from eviction', () => {
    const m = new ExpiringMap<string, number>(4, { touchOnGet: true });
    for (const [i, k] of ['a', 'b', 'c', 'd'].entries()) m.set(k, i, 1000, 0);
    m.get('a', 1); // the oldest: moved behind d (b, c, d, a)
    m.get('d', 1); // of the newer half: stays where it is
    for (const k of ['e', 'f', 'g']) m.set(k, 0, 1000, 0);
    // Evicted in order b, c, d (an exact LRU would have moved d and evicted a instead).
    expect(['a', 'b', 'c', 'd', 'e', 'f', 'g'].map((k) => m.get(k, 1) !== undefined)).toEqual([true, false, false, false, true, true, true]);
  });

  it('drops expired entries at the front on set, before the size bound is reached', () => {
    const m = new ExpiringMap<string, number>(100);
    for (let i = 0; i < 10; i++) m.set(`k${i}`, i, 50, 0);
    m.set('late', 1, 500, 60);
    expect(m.size).toBe(1);
  });

  it('keeps nothing with max 0', () => {
    const m = new ExpiringMap<string, number>(0);
    m.set('a', 1, 1000, 0);
    expect(m.get('a', 1)).toBeUndefined();
  });

  it('with maxBytes, evicts the oldest until the new entry fits, and keeps no entry that alone exceeds the bound', () => {
    const m = new ExpiringMap<string, string>(100, { maxBytes: 10, sizeOf: (_k, v) => v.length });
    m.set('a', 'xxxx', 1000, 0);
    m.set('b', 'xxxx', 1000, 0);
    expect(m.bytes).toBe(8);
    m.set('c', 'xxxx', 1000, 0);
    expect([m.get('a', 1), m.get('b', 1), m.get('c', 1)]).toEqual([undefined, 'xxxx', 'xxxx']);
    expect(m.bytes).toBe(8);
    m.set('d', 'x'.repeat(11), 1000, 0);
    expect([m.get('d', 1), m.size, m.bytes]).toEqual([undefined, 2, 8]);
    m.set('b', 'xx', 1000, 0);
    expect(m.bytes).toBe(6);
    m.set('c', 'y', 5, 0);
    expect(m.get('c', 5)).toBeUndefined();
    expect(m.bytes).toBe(2);
  });
});
