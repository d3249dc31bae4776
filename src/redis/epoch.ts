/**
 * "Redis came back empty" (docs/redis.md): the first edge writes a random epoch id under
 * `<p>epoch` (SET NX, no TTL) and every edge reads it each second and whenever its connection is
 * ready again. The key gone (a restart without persistence, a FLUSHALL, an eviction) or holding
 * another id (a peer saw it gone first and wrote a new one) means the hot state was lost; the
 * listeners are told once per new epoch. Exactly one edge writes the new id: the one that
 * re-seeds what must be re-seeded (`won`).
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import type { RedisClient } from './connection.js';
import { epochKey } from './keys.js';

/** A new epoch this instance learnt of. */
export interface EpochChange {
  /** The epoch it knew; null at its start (Redis held none: a first start, or emptied while no edge ran). */
  readonly previous: string | null;
  readonly current: string;
  /** This instance wrote `current`: it, and no peer, re-seeds. */
  readonly won: boolean;
}

export type EpochListener = (change: EpochChange) => void;

export class RedisEpoch {
  readonly #redis: RedisClient;
  readonly #key: string;
  readonly #log: Logger;
  readonly #periodMs: number;
  readonly #listeners = new Set<EpochListener>();
  #known: string | null = null;
  #checking: Promise<void> | null = null;
  #timer: NodeJS.Timeout | null = null;
  readonly #onReady = (): void => void this.check();
  /** Times this instance found Redis emptied while running (not counting its start). */
  emptied = 0;

  constructor(redis: RedisClient, prefix: string, log: Logger, periodMs = 1000) {
    this.#redis = redis;
    this.#key = epochKey(prefix);
    this.#log = log;
    this.#periodMs = periodMs;
  }

  /** The epoch this instance knows (null until Redis first answered). */
  get current(): string | null {
    return this.#known;
  }

  /** Called with each new epoch; returns the unsubscribe. */
  onChange(listener: EpochListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Reads the epoch now (a Redis that is down is skipped: read again later), then every period and on each reconnect. */
  async start(): Promise<void> {
    await this.check();
    this.#timer = setInterval(() => void this.check(), this.#periodMs);
    this.#timer.unref();
    this.#redis.on('ready', this.#onReady);
  }

  /** One read of the epoch (single-flight); never rejects. */
  check(): Promise<void> {
    this.#checking ??= this.#checkOnce()
      .catch(() => {})
      .finally(() => {
        this.#checking = null;
      });
    return this.#checking;
  }

  async #checkOnce(): Promise<void> {
    const seen = await this.#redis.get(this.#key);
    if (seen !== null && seen === this.#known) return;
    let current = seen;
    let won = false;
    if (current === null) {
      const fresh = randomUUID();
      won = (await this.#redis.set(this.#key, fresh, 'NX')) === 'OK';
      current = won ? fresh : await this.#redis.get(this.#key);
      if (current === null) return;
    }
    const previous = this.#known;
    this.#known = current;
    if (previous === null) {
      if (won) this.#log.info({ epoch: current }, 'redis held no epoch: a new one written (a first start, or Redis emptied while no edge ran)');
    } else {
      this.emptied++;
      this.#log.error(
        { previous, epoch: current, reseeds: won },
        'redis came back empty: its epoch key vanished; hot state (limits, month counters, caches) is rebuilt from the store',
      );
    }
    for (const listener of this.#listeners) listener({ previous, current, won });
  }

  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    this.#redis.off('ready', this.#onReady);
  }
}
