/**
 * Which broker served a lease (docs/clusters.md): learnt from pop responses so that ack, ack batch,
 * lease extend and transaction go back to the same broker. Brokers share one PostgreSQL, so a miss
 * is only a lost locality; the map is therefore bounded and forgetful by design.
 */
import { ExpiringMap } from '../cache/expiring-map.js';

/** Options of a lease map. */
export interface LeaseMapOptions {
  /** How long a learnt lease is remembered (ms). Default 10 minutes, past typical lease times. */
  ttlMs?: number;
  /** Entries kept at most; the oldest is evicted first. Default 100,000. */
  maxEntries?: number;
  /** Injected clock (ms). */
  clock?: () => number;
}

/**
 * A bounded leaseId to broker URL map with a TTL. learn() re-inserts and every entry lives the
 * same TTL, so the oldest entry is also the first to expire: eviction and expiry sweep from the
 * front in O(1) amortised, with no timer per entry.
 */
export class LeaseMap {
  readonly #entries: ExpiringMap<string, string>;
  readonly #ttlMs: number;
  readonly #clock: () => number;

  constructor(opts: LeaseMapOptions = {}) {
    this.#ttlMs = opts.ttlMs ?? 10 * 60 * 1000;
    this.#entries = new ExpiringMap(Math.max(1, opts.maxEntries ?? 100_000));
    this.#clock = opts.clock ?? Date.now;
  }

  /** Remembers that `url` served `leaseId` (a later pop of the same lease refreshes it). */
  learn(leaseId: string, url: string): void {
    const now = this.#clock();
    this.#entries.set(leaseId, url, now + this.#ttlMs, now);
  }

  /** The broker that served `leaseId`, unless forgotten or expired. */
  brokerFor(leaseId: string): string | undefined {
    return this.#entries.get(leaseId, this.#clock());
  }

  /** Entries held, expired ones not yet swept included. */
  get size(): number {
    return this.#entries.size;
  }
}
