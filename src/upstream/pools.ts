/**
 * One keep-alive undici Pool per broker (DESIGN §1.11). Pools are created on first use and live
 * until close(); the broker set can change at runtime (tenant records), so this is a lazy map.
 */
import { Pool } from 'undici';
import type { RawConfig } from '../config/schema.js';

export interface BrokerPools {
  get(url: string): Pool;
  close(): Promise<void>;
}

export function createBrokerPools(cfg: RawConfig['upstream']): BrokerPools {
  const pools = new Map<string, Pool>();
  return {
    get(url: string): Pool {
      let pool = pools.get(url);
      if (!pool) {
        pool = new Pool(url, {
          connections: cfg.connections,
          pipelining: 1,
          connect: { timeout: cfg.connectTimeoutMs },
          // Brokers close idle sockets; a shorter idle time than theirs avoids the send-on-closing race.
          keepAliveTimeout: 4000,
          keepAliveMaxTimeout: 30000,
        });
        pools.set(url, pool);
      }
      return pool;
    },
    async close(): Promise<void> {
      const all = [...pools.values()];
      pools.clear();
      await Promise.all(all.map((p) => p.close().catch(() => p.destroy())));
    },
  };
}
