/**
 * The change log: one row per admin write, appended in the transaction that makes the write, and
 * followed by every instance. A change message on Redis only says "look now" (`poke`); the feed
 * also looks every `periodMs` on its own, so a missed message costs at most that period
 * (docs/store.md, "Changes").
 */
import type { Logger } from '../observability/log.js';
import type { Store, Transaction } from './connection.js';

/** What an admin write appends: `subject` is `<kind>:<id>` (`tenant:acme`, `plan:pro`, `key:<id>`). */
export interface ChangeEntry {
  readonly actor: string;
  readonly subject: string;
  readonly action: string;
  readonly detail?: unknown;
}

/** A change as read back. */
export interface Change extends ChangeEntry {
  readonly seq: number;
  readonly at: Date;
}

/**
 * Appends a change inside the write's transaction and returns its sequence number. Writers take
 * one lock first, so sequence numbers are committed in order: a reader that has seen `n` has seen
 * every change below it.
 */
export async function appendChange(tx: Transaction, schema: string, entry: ChangeEntry): Promise<number> {
  await lockChanges(tx, schema);
  const rows = await tx.query('INSERT INTO change_log (actor, subject, action, detail) VALUES ($1, $2, $3, $4) RETURNING seq', [
    entry.actor,
    entry.subject,
    entry.action,
    entry.detail === undefined ? null : JSON.stringify(entry.detail),
  ]);
  return Number(rows[0]!.seq);
}

/**
 * Takes the writers' lock for the rest of the transaction (taking it again is free). A transaction
 * that writes rows before its change takes it first, so no two writers wait on each other's rows
 * and lock in opposite orders.
 */
export async function lockChanges(tx: Transaction, schema: string): Promise<void> {
  await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`queen-edge-changes:${schema}`]);
}

/** The newest change's sequence number; 0 for an empty log. */
export async function latestChange(store: Store): Promise<number> {
  const rows = await store.query<{ seq: string | null }>('SELECT max(seq) AS seq FROM change_log');
  return Number(rows[0]?.seq ?? 0);
}

/** Changes after `seq`, oldest first, at most `limit`. */
export async function changesSince(store: Store, seq: number, limit = 1000): Promise<Change[]> {
  const rows = await store.query<{ seq: string; at: Date; actor: string; subject: string; action: string; detail: unknown }>(
    'SELECT seq, at, actor, subject, action, detail FROM change_log WHERE seq > $1 ORDER BY seq LIMIT $2',
    [seq, limit],
  );
  return rows.map((r) => ({ seq: Number(r.seq), at: r.at, actor: r.actor, subject: r.subject, action: r.action, detail: r.detail ?? undefined }));
}

/** Called with each batch of new changes whose subject starts with the subscribed prefix. */
export type ChangeHandler = (changes: readonly Change[]) => void | Promise<void>;

/** Follows the change log from a starting point: on `poke` and every `periodMs`. */
export class ChangeFeed {
  readonly #store: Store;
  readonly #log: Logger;
  readonly #periodMs: number;
  readonly #handlers: Array<{ prefix: string; handler: ChangeHandler }> = [];
  #seen = 0;
  #readAt = Date.now();
  #timer: NodeJS.Timeout | null = null;
  #running: Promise<void> | null = null;
  #again = false;

  constructor(store: Store, log: Logger, periodMs = 5000) {
    this.#store = store;
    this.#log = log;
    this.#periodMs = periodMs;
  }

  /** The last change handed to the handlers. */
  get seen(): number {
    return this.#seen;
  }

  /** When the log was last read (Date.now() ms): until then, every change is known here. */
  get readAt(): number {
    return this.#readAt;
  }

  subscribe(prefix: string, handler: ChangeHandler): void {
    this.#handlers.push({ prefix, handler });
  }

  /** Starts following after `fromSeq` (what the caller's initial read already covers). */
  start(fromSeq: number): void {
    this.#seen = fromSeq;
    this.#timer = setInterval(() => void this.poke(), this.#periodMs);
    this.#timer.unref();
  }

  /**
   * Reads new changes now; resolves once they were handed over. Pokes during a read run one more
   * read after it. Before start() it reads nothing: from no known position it would hand over the
   * whole log.
   */
  poke(): Promise<void> {
    if (this.#timer === null) return Promise.resolve();
    if (this.#running) {
      this.#again = true;
      return this.#running;
    }
    this.#running = this.#drain().finally(() => {
      this.#running = null;
    });
    return this.#running;
  }

  stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    return this.#running ?? Promise.resolve();
  }

  async #drain(): Promise<void> {
    do {
      this.#again = false;
      let batch: Change[];
      const reading = Date.now();
      try {
        batch = await changesSince(this.#store, this.#seen);
        this.#readAt = reading;
      } catch (err) {
        // The store is away: the next period or poke tries again from the same point.
        this.#log.debug({ err }, 'change log not read');
        return;
      }
      if (batch.length === 0) continue;
      for (const { prefix, handler } of this.#handlers) {
        const mine = batch.filter((c) => c.subject.startsWith(prefix));
        if (mine.length === 0) continue;
        try {
          await handler(mine);
        } catch (err) {
          this.#log.warn({ err, prefix }, 'change not applied');
        }
      }
      this.#seen = batch[batch.length - 1]!.seq;
      // A full page may have more behind it.
      if (batch.length === 1000) this.#again = true;
    } while (this.#again);
  }
}
