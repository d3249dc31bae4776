/**
 * Circuit breaker for the limiter's Redis (docs/limits.md: an outage costs one timeout, not one per
 * request). Pure state machine on an injected clock: `closed` sends every call; a failure opens
 * it for `openMs`; after that the next caller becomes the one half-open probe, whose result
 * closes or re-opens it. Calls that are not sent are decided by the fail mode.
 */

/** closed: Redis in use; open: not tried until the cool-down ends; half-open: one probe out. */
export type BreakerState = 'closed' | 'open' | 'half-open';

/** The breaker; see the file comment. */
export class Breaker {
  readonly #openMs: number;
  readonly #clock: () => number;
  #state: BreakerState = 'closed';
  #openUntil = 0;

  constructor(openMs: number, clock: () => number) {
    this.#openMs = openMs;
    this.#clock = clock;
  }

  /** True when the caller may send to Redis now (closed, or it is the half-open probe). */
  allow(): boolean {
    if (this.#state === 'closed') return true;
    if (this.#state === 'open' && this.#clock() >= this.#openUntil) {
      this.#state = 'half-open';
      return true;
    }
    return false;
  }

  /** A call succeeded: close. */
  success(): void {
    this.#state = 'closed';
  }

  /** A call failed or timed out: open for the cool-down. */
  failure(): void {
    this.#state = 'open';
    this.#openUntil = this.#clock() + this.#openMs;
  }

  /** The current state (for mode(), metrics and tests). */
  state(): BreakerState {
    return this.#state;
  }
}
