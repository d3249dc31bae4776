/**
 * A Map bounded in size (and optionally in bytes) whose entries expire, on the caller's clock: the
 * verified-token cache, the minted-token cache and the lease map share it. Insertion order is
 * eviction order: set() re-inserts, and so does get() with `touchOnGet` for an entry in the older
 * half (least recently used goes first, as near as matters: a read of the newer half moves
 * nothing). No timers: an expired entry is dropped when read or when it reaches the front of the
 * insertion order.
 */
export interface ExpiringMapOptions<K, V> {
  readonly touchOnGet?: boolean;
  /** With `sizeOf`: the entries' total cost never exceeds this; an entry costing more is not kept. */
  readonly maxBytes?: number;
  /** The cost of one entry, counted against `maxBytes`. */
  readonly sizeOf?: (key: K, value: V) => number;
}

interface Entry<V> {
  readonly value: V;
  readonly expiresAt: number;
  readonly bytes: number;
  /** When it was last (re-)inserted, in insertions: how far from the front it is. */
  seq: number;
}

export class ExpiringMap<K, V> {
  readonly #max: number;
  readonly #maxBytes: number;
  readonly #sizeOf: ((key: K, value: V) => number) | null;
  readonly #touchOnGet: boolean;
  readonly #entries = new Map<K, Entry<V>>();
  #bytes = 0;
  /** Insertions so far (touches included). */
  #seq = 0;

  /** `max` 0 keeps nothing. */
  constructor(max: number, opts: ExpiringMapOptions<K, V> = {}) {
    this.#max = Math.max(0, max);
    this.#touchOnGet = opts.touchOnGet ?? false;
    this.#sizeOf = opts.sizeOf ?? null;
    this.#maxBytes = this.#sizeOf === null ? Infinity : Math.max(0, opts.maxBytes ?? Infinity);
  }

  /** The value under `key` while `now` is before its expiry. */
  get(key: K, now: number): V | undefined {
    const e = this.#entries.get(key);
    if (e === undefined) return undefined;
    if (now >= e.expiresAt) {
      this.#remove(key, e);
      return undefined;
    }
    // Only an entry in the older half moves to the back: one among the newer half is far from
    // eviction anyway, and a hot entry read on every request would otherwise be deleted and
    // inserted again on every request.
    if (this.#touchOnGet && this.#seq - e.seq > this.#entries.size >> 1) {
      this.#entries.delete(key);
      this.#entries.set(key, e);
      e.seq = this.#seq++;
    }
    return e.value;
  }

  /** Stores `value` until `expiresAt` (exclusive); drops the oldest entries beyond the bounds and expired ones at the front. */
  set(key: K, value: V, expiresAt: number, now: number): void {
    if (this.#max === 0) return;
    const bytes = this.#sizeOf === null ? 0 : this.#sizeOf(key, value);
    const old = this.#entries.get(key);
    if (old !== undefined) this.#remove(key, old);
    if (bytes > this.#maxBytes) return;
    for (const [k, e] of this.#entries) {
      if (this.#entries.size < this.#max && this.#bytes + bytes <= this.#maxBytes && e.expiresAt > now) break;
      this.#remove(k, e);
    }
    this.#entries.set(key, { value, expiresAt, bytes, seq: this.#seq++ });
    this.#bytes += bytes;
  }

  /** Drops the entry under `key`, if any. */
  delete(key: K): void {
    const e = this.#entries.get(key);
    if (e !== undefined) this.#remove(key, e);
  }

  /** Drops every entry. */
  clear(): void {
    this.#entries.clear();
    this.#bytes = 0;
  }

  /** Entries held, expired ones not yet dropped included. */
  get size(): number {
    return this.#entries.size;
  }

  /** The entries' total cost by `sizeOf` (0 without one). */
  get bytes(): number {
    return this.#bytes;
  }

  #remove(key: K, e: Entry<V>): void {
    this.#entries.delete(key);
    this.#bytes -= e.bytes;
  }
}
