/**
 * One object per distinct value: tenants that have the same CORS origins, broker list or record
 * parts share one compiled object instead of holding a copy each (docs/tenancy.md, "Many
 * tenants"). Entries are held weakly, so a value no tenant uses any more is collected and its
 * entry removed; the key is the value's canonical text.
 */
export class Interner<T extends object> {
  readonly #refs = new Map<string, WeakRef<T>>();
  readonly #gone = new FinalizationRegistry<string>((key) => {
    // The key may since have been taken by a new object: remove only a dead reference.
    if (this.#refs.get(key)?.deref() === undefined) this.#refs.delete(key);
  });

  /** The object kept for `key`, or `make()`'s, kept from now on. */
  get(key: string, make: () => T): T {
    const known = this.#refs.get(key)?.deref();
    if (known !== undefined) return known;
    const made = make();
    this.#refs.set(key, new WeakRef(made));
    this.#gone.register(made, key);
    return made;
  }

  /** Distinct values alive (tests and metrics). */
  get size(): number {
    return this.#refs.size;
  }
}

/** The text of a string list as an interning key. */
export const listKey = (list: readonly string[]): string => JSON.stringify(list);
