import { describe, expect, it } from 'vitest';
import { buildRing, fmix32, fnv1a32, ringHashOf, ringLookup, ringShares, VNODES_PER_BROKER, type Ring, type RingHash } from '../../src/upstream/ring.js';

/** Independent reference: FNV-1a over Buffer's UTF-8 bytes, with plain multiplication mod 2^32. */
function referenceFnv(s: string): number {
  let h = 2166136261n;
  for (const b of Buffer.from(s, 'utf8')) h = ((h ^ BigInt(b)) * 16777619n) & 0xffffffffn;
  return Number(h);
}

/** Independent reference: murmur3's fmix32 in BigInt arithmetic. */
function referenceFmix(x: number): number {
  let h = BigInt(x);
  h ^= h >> 16n;
  h = (h * 0x85ebca6bn) & 0xffffffffn;
  h ^= h >> 13n;
  h = (h * 0xc2b2ae35n) & 0xffffffffn;
  h ^= h >> 16n;
  return Number(h);
}

const BROKERS = ['http://10.0.0.1:6632', 'http://10.0.0.2:6632', 'http://10.0.0.3:6632'];
const any = () => true;

describe('fnv1a32', () => {
  it.each([
    ['', 0x811c9dc5],
    ['a', 0xe40c292c],
    ['foobar', 0xbf9cf968],
    ['orders:acct-42:billing', 0xca355927],
    ['héllo', 0x4aa48540],
    ['日本', 0x9f26ee51],
    ['😀', 0x33a29608],
  ])('hashes %j to the known vector', (input, expected) => {
    expect(fnv1a32(input)).toBe(expected);
  });

  it('agrees with a byte-wise reference on mixed and malformed UTF-16', () => {
    const inputs = ['ascii', 'ß', '€uro', '\u{10ffff}', 'a\ud800b', '\udc00', 'x\ud83d', 'http://b:1#vnode127'];
    for (const s of inputs) expect(fnv1a32(s)).toBe(referenceFnv(s));
  });
});

describe('buildRing', () => {
  it('has 128 virtual nodes per broker, sorted by hash, owned evenly', () => {
    const ring = buildRing(BROKERS);
    expect(ring.hashes.length).toBe(3 * VNODES_PER_BROKER);
    for (let j = 1; j < ring.hashes.length; j++) expect(ring.hashes[j]!).toBeGreaterThanOrEqual(ring.hashes[j - 1]!);
    const perOwner = [0, 0, 0];
    for (const o of ring.owners) perOwner[o]!++;
    expect(perOwner).toEqual([128, 128, 128]);
    // The lowest and highest nodes, computed by the reference over the labels `<url>#vnode<i>`.
    expect(ring.hashes[0]).toBe(0x00176db6);
    expect(ring.hashes[ring.hashes.length - 1]).toBe(0xff176c23);
    expect(Object.isFrozen(ring)).toBe(true);
  });

  it('labels nodes with the URL without its trailing slash', () => {
    expect(Array.from(buildRing(['http://b:1/']).hashes)).toEqual(Array.from(buildRing(['http://b:1']).hashes));
    expect(buildRing(['http://b:1']).hashes).toContain(referenceFnv('http://b:1#vnode0'));
  });

  it('orders equal hashes by broker order', () => {
    const ring = buildRing(['http://same:1', 'http://same:1']);
    for (let j = 0; j < ring.hashes.length; j += 2) {
      expect(ring.hashes[j]).toBe(ring.hashes[j + 1]);
      expect([ring.owners[j], ring.owners[j + 1]]).toEqual([0, 1]);
    }
  });

  it('gives each broker a share of the key space that sums to one', () => {
    const shares = ringShares(buildRing(BROKERS));
    expect(shares.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    expect(ringShares(buildRing(['http://only:1']))).toEqual([1]);
  });
});

describe('ringLookup', () => {
  const ring = buildRing(BROKERS);

  // Expected brokers computed by an independent script from the ring rules in docs/clusters.md.
  it.each([
    ['orders:acct-42:billing', 0, 1],
    ['orders:*:__QUEUE_MODE__', 1, 0],
    ['orders:Default', 0, 1],
    ['jobs:*:*', 2, 1],
    ['a', 2, 1],
    ['b', 2, 0],
  ])('places %j on broker %i, and on %i when that one is refused', (key, first, next) => {
    expect(ringLookup(ring, key, any)).toBe(first);
    expect(ringLookup(ring, key, (b) => b !== first)).toBe(next);
  });

  it('wraps to the first node when the key hashes above the highest node', () => {
    expect(fnv1a32('wrap-729')).toBe(0xff70dcec);
    expect(fnv1a32('wrap-729')).toBeGreaterThan(ring.hashes[ring.hashes.length - 1]!);
    expect(ring.owners[0]).toBe(1);
    expect(ringLookup(ring, 'wrap-729', any)).toBe(1);
    expect(ringLookup(ring, 'wrap-729', (b) => b !== 1)).toBe(0);
  });

  it('takes the first node for a key below the lowest node', () => {
    expect(fnv1a32('low-3122')).toBe(0x658);
    expect(ringLookup(ring, 'low-3122', any)).toBe(1);
  });

  it('returns -1 when no broker is accepted, or the ring is empty', () => {
    expect(ringLookup(ring, 'a', () => false)).toBe(-1);
    expect(ringLookup(buildRing([]), 'a', any)).toBe(-1);
  });

  it('asks about each refused broker once per run of its nodes', () => {
    const asked: number[] = [];
    ringLookup(ring, 'a', (b) => {
      asked.push(b);
      return false;
    });
    for (let k = 1; k < asked.length; k++) expect(asked[k]).not.toBe(asked[k - 1]);
  });

  const pct = (xs: readonly number[]) => xs.map((x) => `${(x * 100).toFixed(2)}%`).join(' / ');

  /** Lanes per broker over `n` distinct lane keys, printed for the record. */
  function spread(r: Ring, n: number, label: string): number[] {
    const counts = new Array<number>(r.brokers.length).fill(0);
    for (let i = 0; i < n; i++) counts[ringLookup(r, `orders:acct-${i}:billing`, any)]!++;
    console.log(`ring ${label}, ${n} lanes: ${counts.join(' / ')} (${pct(counts.map((c) => c / n))}); key shares ${pct(ringShares(r))}`);
    return counts;
  }

  it.each([10_000, 100_000])('sends %i distinct lanes to each broker in proportion to its key share', (n) => {
    const counts = spread(ring, n, BROKERS.join(', '));
    const shares = ringShares(ring);
    for (const [b, c] of counts.entries()) expect(Math.abs(c / n - shares[b]!)).toBeLessThan(0.015);
  });

  // FNV-1a mixes its last input bytes weakly, so the labels `#vnode0`..`#vnode9` of one broker land
  // in one tight run (hashes 16777619 apart), and so on by tens: a broker has far fewer than 128
  // independent points and the split depends on the URLs. It is the SDKs' ring, kept for agreement
  // (docs/clusters.md); these URLs split within ±15%, the 10.0.0.x ones above split 44 / 22 / 34.
  it.each([10_000, 100_000])('splits %i distinct lanes within ±15 percent for well-spread URLs', (n) => {
    const urls = ['http://queen-a.internal:6632', 'http://queen-b.internal:6632', 'http://queen-c.internal:6632'];
    const counts = spread(buildRing(urls), n, urls.join(', '));
    for (const c of counts) expect(Math.abs(c - n / 3) / (n / 3)).toBeLessThanOrEqual(0.15);
  });

  it('skews the split for some URL sets (the SDK hash, pinned)', () => {
    expect(ringShares(ring).map((s) => Math.round(s * 100))).toEqual([44, 22, 34]);
  });

  it.each(['sdk', 'avalanche'] as const)('%s: moves only the removed broker’s lanes, to where a ring without it puts them', (hash) => {
    const ring = buildRing(BROKERS, hash);
    const without = buildRing([BROKERS[0]!, BROKERS[1]!], hash);
    let moved = 0;
    for (let i = 0; i < 10_000; i++) {
      const key = `lane-${i}`;
      const before = ringLookup(ring, key, any);
      const after = ringLookup(without, key, any);
      if (before !== 2) expect(after).toBe(before);
      else moved++;
      // Skipping broker 2 as unhealthy is the same as removing it from the ring.
      expect(ringLookup(ring, key, (b) => b !== 2)).toBe(after);
    }
    expect(moved).toBeGreaterThan(0);
  });

  it.each(['sdk', 'avalanche'] as const)('%s: moves lanes only onto an added broker', (hash) => {
    const ring = buildRing(BROKERS, hash);
    const grown = buildRing([...BROKERS, 'http://10.0.0.4:6632'], hash);
    for (let i = 0; i < 10_000; i++) {
      const key = `lane-${i}`;
      const after = ringLookup(grown, key, any);
      if (after !== 3) expect(after).toBe(ringLookup(ring, key, any));
    }
  });
});

describe('avalanche ring (upstream.ringHash: avalanche)', () => {
  const ring = buildRing(BROKERS, 'avalanche');

  it.each([
    [0, 0],
    [1, 0x514e28b7],
    [0xdeadbeef, 0x0de5c6a9],
  ])('fmix32(%i) is the murmur3 finaliser value %i', (input, expected) => {
    expect(fmix32(input)).toBe(expected);
  });

  it('agrees with a BigInt fmix32 over FNV-1a values, and leaves the sdk positions alone', () => {
    for (const s of ['', 'a', 'orders:acct-42:billing', 'http://10.0.0.1:6632#vnode0', '日本']) {
      expect(ringHashOf(s, 'avalanche')).toBe(referenceFmix(referenceFnv(s)));
      expect(ringHashOf(s, 'sdk')).toBe(referenceFnv(s));
    }
    expect(ringHashOf('orders:acct-42:billing', 'avalanche')).toBe(0xf6e0256f);
  });

  it('places nodes at fmix32(FNV-1a(label)), sorted, and is not the default', () => {
    expect(ring.hash).toBe('avalanche');
    expect(buildRing(BROKERS).hash).toBe('sdk');
    expect(Array.from(buildRing(BROKERS).hashes)).toEqual(Array.from(buildRing(BROKERS, 'sdk').hashes));
    const expected = BROKERS.flatMap((u) => Array.from({ length: VNODES_PER_BROKER }, (_, i) => referenceFmix(referenceFnv(`${u}#vnode${i}`)))).sort(
      (a, b) => a - b,
    );
    expect(Array.from(ring.hashes)).toEqual(expected);
    expect(ring.hashes[0]).toBe(0x0002d97a);
    expect(ring.owners[0]).toBe(1);
    expect(ring.hashes[ring.hashes.length - 1]).toBe(0xff7fbd99);
  });

  // Expected brokers computed by an independent script (Python: FNV-1a, fmix32, bisect).
  it.each([
    ['orders:acct-42:billing', 1, 0],
    ['orders:*:__QUEUE_MODE__', 2, 0],
    ['orders:Default', 1, 2],
    ['jobs:*:*', 1, 0],
    ['a', 2, 1],
    ['b', 0, 1],
  ])('places %j on broker %i, and on %i when that one is refused', (key, first, next) => {
    expect(ringLookup(ring, key, any)).toBe(first);
    expect(ringLookup(ring, key, (b) => b !== first)).toBe(next);
  });

  it('wraps to the first node when the key is above the highest node', () => {
    expect(ringHashOf('wrap-396', 'avalanche')).toBe(0xffc81e8c);
    expect(ringLookup(ring, 'wrap-396', any)).toBe(1);
    expect(ringLookup(ring, 'wrap-396', (b) => b !== 1)).toBe(2);
    expect(ringHashOf('low-39042', 'avalanche')).toBe(0x20a06);
    expect(ringLookup(ring, 'low-39042', any)).toBe(1);
  });

  /** Largest deviation of a broker's share from an even split, relative to the even share. */
  const skew = (shares: readonly number[]) => Math.max(...shares.map((s) => Math.abs(s * shares.length - 1)));

  it('splits 100,000 lanes within ±15% on the URLs the SDK ring splits 44 / 22 / 34', () => {
    const n = 100_000;
    const counts = [0, 0, 0];
    for (let i = 0; i < n; i++) counts[ringLookup(ring, `orders:acct-${i}:billing`, any)]!++;
    console.log(
      `avalanche ring ${BROKERS.join(', ')}, ${n} lanes: ${counts.join(' / ')}; key shares ${ringShares(ring)
        .map((x) => (x * 100).toFixed(2))
        .join(' / ')}%`,
    );
    for (const c of counts) expect(Math.abs(c - n / 3) / (n / 3)).toBeLessThanOrEqual(0.15);
    expect(skew(ringShares(buildRing(BROKERS, 'sdk')))).toBeGreaterThan(0.3);
  });

  // Consecutive ports are a common layout and the SDK ring's worst case: FNV-1a clusters URLs that
  // differ in their last characters. 128 nodes per broker still leave the avalanche ring a spread
  // (a standard deviation of about 7% per broker), so the claim is statistical: most sets, not all.
  it('balances consecutive-port brokers far better than the SDK ring (a fixed scan of 300 sets)', () => {
    const within = (hash: RingHash) => {
      let ok = 0;
      for (let k = 0; k < 300; k++) {
        const base = 20000 + k * 97;
        if (
          skew(
            ringShares(
              buildRing(
                [0, 1, 2].map((d) => `http://127.0.0.1:${base + d}`),
                hash,
              ),
            ),
          ) <= 0.15
        )
          ok++;
      }
      return ok / 300;
    };
    const sdk = within('sdk');
    const avalanche = within('avalanche');
    console.log(`sets of 3 consecutive ports within ±15% of even: sdk ${(sdk * 100).toFixed(0)}%, avalanche ${(avalanche * 100).toFixed(0)}%`);
    expect(avalanche).toBeGreaterThanOrEqual(0.85);
    expect(sdk).toBeLessThan(0.3);
  });
});
