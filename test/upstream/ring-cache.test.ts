import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it, vi } from 'vitest';
import { buildRing, ringShares } from '../../src/upstream/ring.js';
import { RingCache, type BuiltRing } from '../../src/upstream/ring-cache.js';

v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/**
 * Broker lists that come and go (dedicated brokers of tenants created and deleted); every 500th
 * ring is held. A function of its own, so no frame of the test keeps the last ring.
 */
function churn(cache: RingCache, n: number): BuiltRing[] {
  const held: BuiltRing[] = [];
  for (let i = 0; i < n; i++) {
    const built = cache.ringOf([`http://10.1.${i >> 8}.${i & 255}:6632`]);
    if (i % 500 === 0) held.push(built);
  }
  return held;
}

describe('ring cache', () => {
  it('shares one ring per broker list, built as buildRing builds it', () => {
    const cache = new RingCache('avalanche');
    const a = cache.ringOf(['http://10.0.0.1:6632', 'http://10.0.0.2:6632']);
    expect(cache.ringOf(['http://10.0.0.1:6632', 'http://10.0.0.2:6632'])).toBe(a);
    expect(cache.ringOf(['http://10.0.0.2:6632', 'http://10.0.0.1:6632'])).not.toBe(a);
    const ring = buildRing(['http://10.0.0.1:6632', 'http://10.0.0.2:6632'], 'avalanche');
    expect(a.ring).toEqual(ring);
    expect(a.shares).toEqual(ringShares(ring));
  });

  it('forgets the rings nothing holds after a collection, and keeps those still held', async () => {
    const cache = new RingCache('sdk');
    const held = churn(cache, 2000);
    expect(cache.size).toBe(2000);
    // Finalizers run on a later turn after the collection that freed their objects.
    await vi.waitFor(
      async () => {
        gc();
        await new Promise((resolve) => setImmediate(resolve));
        expect(cache.size).toBe(held.length);
      },
      { timeout: 10_000, interval: 50 },
    );
    expect(cache.ringOf(['http://10.1.0.0:6632'])).toBe(held[0]);
  });
});
