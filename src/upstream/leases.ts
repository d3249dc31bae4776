/**
 * Which broker served a lease (DESIGN §4): learnt from pop responses so that ack, ack batch,
 * lease extend and transaction go back to the same broker. Brokers share one PostgreSQL, so a miss
 * is only a lost locality; the map is therefore bounded and forgetful by design.
 */

/** Options of a lease map. */
export interface LeaseMapOptions {
  /** How long a learnt lease is remembered (ms). Default 10 minutes, past typical lease times. */
  ttlMs?: number;
  /** Entries kept at most; the oldest is evicted first. Default 100,000. */
  maxEntries?: number;
  /** Injected clock (ms). */
  clock?: () => number;
}

interface Entry {
  readonly url: string;
  readonly expiresAt: number;
}

/**
 * A bounded leaseId to broker URL map with a TTL. A Map iterates in insertion order and learn()
 * re-inserts, so the first key is always the oldest: eviction and expiry sweep from the front in
 * O(1) amortised, with no timer per entry.
 */
export class LeaseMap {
  readonly #entries = new Map<string, Entry>();
  readonly #ttlMs: number;
  readonly #maxEntries: number;
  readonly #clock: () => number;

  constructor(opts: LeaseMapOptions = {}) {
    this.#ttlMs = opts.ttlMs ?? 10 * 60 * 1000;
    this.#maxEntries = Math.max(1, opts.maxEntries ?? 100_000);
    this.#clock = opts.clock ?? Date.now;
  }

  /** Remembers that `url` served `leaseId` (a later pop of the same lease refreshes it). */
  learn(leaseId: string, url: string): void {
    const now = this.#clock();
    this.#entries.delete(leaseId);
    this.#entries.set(leaseId, { url, expiresAt: now + this.#ttlMs });
    this.#sweep(now);
  }

  /** The broker that served `leaseId`, unless forgotten or expired. */
  brokerFor(leaseId: string): string | undefined {
    const e = this.#entries.get(leaseId);
    if (e === undefined) return undefined;
    if (e.expiresAt <= this.#clock()) {
      this.#entries.delete(leaseId);
      return undefined;
    }
    return e.url;
  }

  /** Entries held, expired ones not yet swept included. */
  get size(): number {
    return this.#entries.size;
  }

  #sweep(now: number): void {
    for (const [id, e] of this.#entries) {
      if (this.#entries.size <= this.#maxEntries && e.expiresAt > now) return;
      this.#entries.delete(id);
    }
  }
}
