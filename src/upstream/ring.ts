/**
 * The consistent-hash ring (docs/clusters.md), the same as the Queen SDKs' so an SDK holding several
 * broker URLs and queen-edge agree on a lane's placement: 32-bit FNV-1a over UTF-8 bytes, 128
 * virtual nodes per broker labelled `<url>#vnode<i>`, first node with hash >= the key's, wrapping.
 * The `avalanche` variant passes every FNV-1a value (nodes and keys) through murmur3's fmix32, as
 * HAProxy's `hash-type consistent avalanche` does: better balance, placement unlike the SDKs'.
 * Pure: no clock, no sockets, no state outside the frozen ring.
 */

/** Virtual nodes per broker (docs/clusters.md); changing it moves every lane, so it is fixed. */
export const VNODES_PER_BROKER = 128;

const FNV_OFFSET_BASIS = 2166136261;
const FNV_PRIME = 16777619;
const TWO_POW_32 = 4294967296;

/**
 * 32-bit FNV-1a of the UTF-8 encoding of `s`. Encodes inline instead of through TextEncoder so a
 * lookup allocates nothing; lone surrogates hash as U+FFFD, as Buffer.from(s, 'utf8') encodes them.
 */
export function fnv1a32(s: string): number {
  let h = FNV_OFFSET_BASIS;
  const len = s.length;
  for (let i = 0; i < len; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      h = Math.imul(h ^ c, FNV_PRIME);
      continue;
    }
    if (c < 0x800) {
      h = Math.imul(h ^ (0xc0 | (c >> 6)), FNV_PRIME);
      h = Math.imul(h ^ (0x80 | (c & 0x3f)), FNV_PRIME);
      continue;
    }
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < len) {
      const lo = s.charCodeAt(i + 1);
      if (lo >= 0xdc00 && lo <= 0xdfff) {
        const cp = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
        h = Math.imul(h ^ (0xf0 | (cp >> 18)), FNV_PRIME);
        h = Math.imul(h ^ (0x80 | ((cp >> 12) & 0x3f)), FNV_PRIME);
        h = Math.imul(h ^ (0x80 | ((cp >> 6) & 0x3f)), FNV_PRIME);
        h = Math.imul(h ^ (0x80 | (cp & 0x3f)), FNV_PRIME);
        i++;
        continue;
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd;
    h = Math.imul(h ^ (0xe0 | (c >> 12)), FNV_PRIME);
    h = Math.imul(h ^ (0x80 | ((c >> 6) & 0x3f)), FNV_PRIME);
    h = Math.imul(h ^ (0x80 | (c & 0x3f)), FNV_PRIME);
  }
  return h >>> 0;
}

/**
 * How node labels and lane keys become ring positions. `sdk`: FNV-1a alone, the SDKs' placement.
 * `avalanche`: fmix32(FNV-1a), which spreads FNV-1a's clustered values evenly over the ring.
 */
export type RingHash = 'sdk' | 'avalanche';

/**
 * murmur3's 32-bit finaliser: a bijection on 32-bit values in which every input bit flips each
 * output bit with probability close to 1/2, so values that differ in a few bits land far apart.
 */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The ring position of `s` under `hash`. */
export function ringHashOf(s: string, hash: RingHash): number {
  return hash === 'avalanche' ? fmix32(fnv1a32(s)) : fnv1a32(s);
}

/**
 * A built ring. `hashes` is sorted ascending and `owners[j]` is the index in `brokers` of node j.
 * The struct is frozen; typed arrays cannot be, so treat them as read-only.
 */
export interface Ring {
  readonly brokers: readonly string[];
  readonly hash: RingHash;
  readonly hashes: Uint32Array;
  readonly owners: Uint32Array;
}

/** Builds the ring for a broker list (base URLs; a trailing slash is dropped from the label). */
export function buildRing(brokers: readonly string[], hash: RingHash = 'sdk'): Ring {
  const n = brokers.length * VNODES_PER_BROKER;
  const nodeHash = new Uint32Array(n);
  for (let b = 0; b < brokers.length; b++) {
    const label = brokers[b]!.replace(/\/+$/, '');
    for (let v = 0; v < VNODES_PER_BROKER; v++) nodeHash[b * VNODES_PER_BROKER + v] = ringHashOf(`${label}#vnode${v}`, hash);
  }
  // Node n's broker is floor(n / 128), so ordering ties by node number orders them by broker.
  const order = Array.from({ length: n }, (_, i) => i);
  order.sort((a, b) => nodeHash[a]! - nodeHash[b]! || a - b);
  const hashes = new Uint32Array(n);
  const owners = new Uint32Array(n);
  for (let j = 0; j < n; j++) {
    hashes[j] = nodeHash[order[j]!]!;
    owners[j] = Math.floor(order[j]! / VNODES_PER_BROKER);
  }
  return Object.freeze({ brokers: Object.freeze(brokers.slice()), hash, hashes, owners });
}

/**
 * Index of the broker serving `key`: the first node with hash >= the key's (wrapping to the
 * first node), then onwards around the ring to the first node whose broker `accept`s. -1 when no
 * broker is accepted. Allocates nothing; `accept` may be called more than once per broker.
 */
export function ringLookup(ring: Ring, key: string, accept: (brokerIndex: number) => boolean): number {
  const { hashes, owners } = ring;
  const n = hashes.length;
  if (n === 0) return -1;
  const h = ringHashOf(key, ring.hash);
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (hashes[mid]! < h) lo = mid + 1;
    else hi = mid;
  }
  let j = lo === n ? 0 : lo;
  let rejected = -1;
  for (let k = 0; k < n; k++) {
    const owner = owners[j]!;
    // Runs of one broker's nodes are common; asking again about the broker just refused is waste.
    if (owner !== rejected) {
      if (accept(owner)) return owner;
      rejected = owner;
    }
    j = j + 1 === n ? 0 : j + 1;
  }
  return -1;
}

/** Fraction of the 32-bit key space each broker owns (index-aligned with `ring.brokers`). */
export function ringShares(ring: Ring): number[] {
  const shares = new Array<number>(ring.brokers.length).fill(0);
  const n = ring.hashes.length;
  for (let j = 0; j < n; j++) {
    // Node j serves keys in (previous node's hash, its own hash]; node 0 also serves the wrap.
    const arc = j === 0 ? ring.hashes[0]! + TWO_POW_32 - ring.hashes[n - 1]! : ring.hashes[j]! - ring.hashes[j - 1]!;
    shares[ring.owners[j]!]! += arc / TWO_POW_32;
  }
  return shares;
}
