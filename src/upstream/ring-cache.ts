/**
 * Built rings shared by the tenants with the same broker list: 100,000 tenants often list a few
 * brokers, and a ring of three brokers is 384 nodes. A ring is held weakly: it lives while a
 * tenant's entry (or a request holding an old tenant object) uses it, and is forgotten after the
 * collection that frees it, so broker lists that come and go never accumulate and no pass over
 * the tenants is needed to find the unused ones.
 */
import { Interner } from '../cache/intern.js';
import { buildRing, ringShares, type Ring, type RingHash } from './ring.js';

/** A built ring and its key shares. */
export interface BuiltRing {
  readonly ring: Ring;
  readonly shares: readonly number[];
}

export class RingCache {
  readonly #hash: RingHash;
  readonly #rings = new Interner<BuiltRing>();

  constructor(hash: RingHash) {
    this.#hash = hash;
  }

  /** The ring of `brokers`, built on first use and shared while anything holds it. */
  ringOf(brokers: readonly string[]): BuiltRing {
    return this.#rings.get(ringKey(brokers), () => {
      const ring = buildRing(brokers, this.#hash);
      return Object.freeze({ ring, shares: Object.freeze(ringShares(ring)) });
    });
  }

  /** Broker lists remembered (the rings alive, and those collected whose entry is not cleared yet). */
  get size(): number {
    return this.#rings.size;
  }
}

/** Cache key of a broker list; a newline cannot occur in a validated URL. */
function ringKey(brokers: readonly string[]): string {
  return brokers.join('\n');
}
