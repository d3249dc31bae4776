/**
 * Keep-alive undici Pools per broker (docs/architecture.md), created on first use (the broker set can
 * change at runtime through tenant records) and kept until close().
 *
 * Parked long polls get a pool of their own with no connection cap: each holds its connection
 * for up to the long-poll timeout, so under the request pool's cap the poll beyond it would wait
 * inside undici and then park for its whole timeout again. They are bounded per tenant by the
 * plan's `parkedPolls` instead.
 */
import { Pool } from 'undici';
import type { RawConfig } from '../config/schema.js';

export interface BrokerPools {
  /** The pool for `url`; `parked` selects the uncapped pool for `wait=true` pops. */
  get(url: string, parked: boolean): Pool;
  /** Closes, once their requests in flight end, the pools of brokers not in `urls`. */
  retain(urls: ReadonlySet<string>): void;
  close(): Promise<void>;
}

export function createBrokerPools(cfg: RawConfig['upstream']): BrokerPools {
  const requests = new Map<string, Pool>();
  const parkedPools = new Map<string, Pool>();
  const open = (url: string, connections: number | null): Pool =>
    new Pool(url, {
      connections,
      pipelining: 1,
      connect: { timeout: cfg.connectTimeoutMs },
      // Brokers close idle sockets; a shorter idle time than theirs avoids the send-on-closing race.
      keepAliveTimeout: 4000,
      keepAliveMaxTimeout: 30000,
    });
  return {
    get(url: string, parked: boolean): Pool {
      const map = parked ? parkedPools : requests;
      let pool = map.get(url);
      if (!pool) {
        pool = open(url, parked ? null : cfg.connections);
        map.set(url, pool);
      }
      return pool;
    },
    retain(urls: ReadonlySet<string>): void {
      for (const map of [requests, parkedPools]) {
        for (const [url, pool] of map) {
          if (urls.has(url)) continue;
          map.delete(url);
          void pool.close().catch(() => pool.destroy());
        }
      }
    },
    async close(): Promise<void> {
      const all = [...requests.values(), ...parkedPools.values()];
      requests.clear();
      parkedPools.clear();
      await Promise.all(all.map((p) => p.close().catch(() => p.destroy())));
    },
  };
}
