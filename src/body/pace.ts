/**
 * A minimum rate for request bodies (docs/limits.md, "Bodies in flight"), buffered and streamed
 * alike: after a short grace, a body must keep coming at `minBytesPerSec` on average, as Apache's
 * mod_reqtimeout `MinRate` does (each byte received extends the time allowed), so a head that
 * sends nothing, or a trickle, holds a budget or a broker connection for seconds, not for the
 * whole body deadline. One periodic sweep checks every body being received: no timer per request.
 * The sweep's timer stops on the first sweep that finds nothing to watch, not when the last body
 * leaves: under steady traffic the set empties and fills between requests, and starting and
 * stopping an interval each time cost more than the rest of the pace.
 */

/** `server.bodyBudget`'s pace settings. */
export interface PaceSettings {
  /** Time a body may take before the rate is asked of it. */
  readonly graceMs: number;
  /** After the grace, each byte received allows this much more time: `graceMs + bytes × 1000 / minBytesPerSec`. */
  readonly minBytesPerSec: number;
}

/** A body being received, as the sweep sees it. */
export interface PacedBody {
  /** When the clock started (performance.now()); moved on while the edge is not reading. */
  paceFrom: number;
  /** Bytes already counted when the clock (re)started. */
  paceBase: number;
  /** Absolute end (performance.now()) however fast it comes; Infinity for none. */
  readonly paceDeadline: number;
  /** Bytes received so far. */
  paceBytes(): number;
  /**
   * False while the edge is the one not reading (a streamed body waiting for a broker connection,
   * or held back by the broker's own pace): the client is not to blame, and its clock waits.
   */
  paceReading(): boolean;
  /** Too slow (`late` false) or past its deadline (`late` true): stop receiving it. */
  paceCut(late: boolean): void;
}

/** True when a body that has been received for `elapsedMs` and brought `bytes` is slower than the pace allows. */
export function tooSlow(elapsedMs: number, bytes: number, s: PaceSettings): boolean {
  return elapsedMs > s.graceMs + (bytes * 1000) / s.minBytesPerSec;
}

/** The bodies being received, swept every `tickMs` while there is one. */
export class BodyPace {
  readonly #bodies = new Set<PacedBody>();
  #timer: NodeJS.Timeout | null = null;
  readonly #tickMs: number;

  constructor(
    readonly settings: PaceSettings,
    /** How often the sweep runs: the pace and the deadlines are kept to within this. */
    tickMs: number,
    readonly now: () => number = () => performance.now(),
  ) {
    this.#tickMs = tickMs;
  }

  get size(): number {
    return this.#bodies.size;
  }

  /** The sweep's timer is running. */
  get ticking(): boolean {
    return this.#timer !== null;
  }

  watch(b: PacedBody): void {
    this.#bodies.add(b);
    if (this.#timer === null) {
      this.#timer = setInterval(() => this.sweep(), this.#tickMs);
      this.#timer.unref();
    }
  }

  unwatch(b: PacedBody): void {
    this.#bodies.delete(b);
  }

  /** Cuts the bodies past their deadline or slower than the pace; stops the timer when none is left. */
  sweep(): void {
    if (this.#bodies.size === 0) {
      if (this.#timer !== null) clearInterval(this.#timer);
      this.#timer = null;
      return;
    }
    const now = this.now();
    for (const b of this.#bodies) {
      if (now > b.paceDeadline) {
        this.unwatch(b);
        b.paceCut(true);
        continue;
      }
      const bytes = b.paceBytes();
      if (!b.paceReading()) {
        b.paceFrom = now;
        b.paceBase = bytes;
      } else if (tooSlow(now - b.paceFrom, bytes - b.paceBase, this.settings)) {
        this.unwatch(b);
        b.paceCut(false);
      }
    }
  }

  close(): void {
    this.#bodies.clear();
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }
}

/** The sweep's period for these settings: a quarter of the shortest time it keeps, between 25 and 500 ms. */
export function paceTick(graceMs: number, deadlineMs: number): number {
  return Math.max(25, Math.min(500, Math.floor(Math.min(graceMs, deadlineMs) / 4)));
}
