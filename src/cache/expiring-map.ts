/**
 * A Map bounded in size whose entries expire, on the caller's clock: the verified-token cache,
 * the minted-token cache and the lease map share it. Insertion order is eviction order: set()
 * re-inserts, and so does get() with `touchOnGet` (least recently used goes first). No timers: an
 * expired entry is dropped when read or when it reaches the front of the insertion order.
 */
export class ExpiringMap<K, V> {
  readonly #max: number;
  readonly #touchOnGet: boolean;
  readonly #entries = new Map<K, { readonly value: V; readonly expiresAt: number }>();

  /** `max` 0 keeps nothing. */
  constructor(max: number, opts: { readonly touchOnGet?: boolean } = {}) {
    this.#max = Math.max(0, max);
    this.#touchOnGet = opts.touchOnGet ?? false;
  }

  /** The value under `key` while `now` is before its expiry. */
  get(key: K, now: number): V | undefined {
    const e = this.#entries.get(key);
    if (e === undefined) return undefined;
    if (now >= e.expiresAt) {
      this.#entries.delete(key);
      return undefined;
    }
    if (this.#touchOnGet) {
      this.#entries.delete(key);
      this.#entries.set(key, e);
    }
    return e.value;
  }

  /** Stores `value` until `expiresAt` (exclusive); drops the oldest entries beyond `max` and expired ones at the front. */
  set(key: K, value: V, expiresAt: number, now: number): void {
    if (this.#max === 0) return;
    this.#entries.delete(key);
    for (const [k, e] of this.#entries) {
      if (this.#entries.size < this.#max && e.expiresAt > now) break;
      this.#entries.delete(k);
    }
    this.#entries.set(key, { value, expiresAt });
  }

  /** Entries held, expired ones not yet dropped included. */
  get size(): number {
    return this.#entries.size;
  }
}
