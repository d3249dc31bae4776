/**
 * Deadlines of one fixed length for many items, swept together: no timer per item. With one
 * length, insertion order is deadline order, so a sweep stops at the first item not yet due, and
 * adding and removing are O(1) Map operations. The sweep's timer runs while there are items and
 * stops at the first sweep that finds none (under steady traffic the set empties and fills between
 * requests; starting and stopping an interval each time would cost what a timer per item does).
 */
export class Deadlines<K> {
  readonly #due = new Map<K, number>();
  #timer: NodeJS.Timeout | null = null;

  constructor(
    /** How long an item has (ms). */
    readonly lengthMs: number,
    /** How often the sweep runs: an item expires within this after its deadline. */
    readonly tickMs: number,
    /** Told each item whose deadline passed, once; it is no longer watched. */
    readonly expire: (item: K) => void,
    readonly now: () => number = () => performance.now(),
  ) {}

  /** Starts `item`'s deadline (a restart moves it to the back). */
  add(item: K): void {
    this.#due.delete(item);
    this.#due.set(item, this.now() + this.lengthMs);
    if (this.#timer === null) {
      this.#timer = setInterval(() => this.sweep(), this.tickMs);
      this.#timer.unref();
    }
  }

  delete(item: K): void {
    this.#due.delete(item);
  }

  get size(): number {
    return this.#due.size;
  }

  /** The sweep's timer is running. */
  get ticking(): boolean {
    return this.#timer !== null;
  }

  /** Expires what is due; stops the timer when nothing is left. */
  sweep(): void {
    if (this.#due.size === 0) {
      this.close();
      return;
    }
    const now = this.now();
    for (const [item, at] of this.#due) {
      if (at > now) break;
      this.#due.delete(item);
      this.expire(item);
    }
  }

  /** Stops the timer and forgets every item. */
  close(): void {
    this.#due.clear();
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }
}
