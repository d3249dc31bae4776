/**
 * Change pokes over Redis pub/sub (`<prefix>changes`): after a write commits in the store, its
 * writer publishes `<seq> <subject>`; every instance that hears one reads the change log now
 * instead of at its next period. A message carries no data: a lost one, a Redis that restarted
 * empty, or no Redis at all delays a change by the feed's period, never loses it (docs/store.md).
 */
import type { Logger } from '../observability/log.js';
import { subscriberFor, type RedisClient, type Subscriber } from '../redis/connection.js';
import type { ChangeFeed } from './changes.js';

export class ChangePokes {
  readonly #redis: RedisClient | null;
  readonly #channel: string;
  readonly #feed: ChangeFeed;
  readonly #log: Logger;
  #subscriber: Subscriber | null = null;

  constructor(redis: RedisClient | null, channel: string, feed: ChangeFeed, log: Logger) {
    this.#redis = redis;
    this.#channel = channel;
    this.#feed = feed;
    this.#log = log;
  }

  /** Subscribes (a connection of its own); every message, and every reconnect, pokes the feed. */
  async start(seeds: readonly string[]): Promise<void> {
    if (!this.#redis) return;
    // Every subscription (the first, and again after a reconnect) pokes: messages published while away were missed.
    const sub = subscriberFor(this.#redis, seeds, [this.#channel], {
      subscribed: () => void this.#feed.poke(),
      failed: (err) => this.#log.warn({ err }, 'change pokes: subscribe failed; peers follow the change log every period'),
    });
    this.#subscriber = sub;
    sub.connection.on('message', (channel: string) => {
      if (channel === this.#channel) void this.#feed.poke();
    });
    await sub.first;
  }

  /** Tells peers a change committed; a failure only costs them the feed's period. */
  async announce(seq: number, subject: string): Promise<void> {
    await this.#redis?.publish(this.#channel, `${seq} ${subject}`).catch((err: unknown) => this.#log.debug({ err }, 'change poke not published'));
  }

  close(): void {
    this.#subscriber?.close();
    this.#subscriber = null;
  }
}
