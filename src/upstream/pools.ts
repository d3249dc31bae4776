/**
 * Keep-alive undici Pools per broker (docs/architecture.md), created on first use (the broker set can
 * change at runtime through tenant records) and kept until close().
 *
 * Parked long polls get a pool of their own with no connection cap: each holds its connection
 * for up to the long-poll timeout, so under the request pool's cap the poll beyond it would wait
 * inside undici and then park for its whole timeout again. They are bounded per tenant by the
 * plan's `parkedPolls` instead.
 *
 * The request pool is shared by every tenant listing the broker, so each tenant may hold only its
 * share of it (`upstream.tenantShare` of `connections`, docs/clusters.md): one tenant's slow
 * requests cannot take every connection and leave the others queued inside undici.
 */
import { Pool } from 'undici';
import type { RawConfig } from '../config/schema.js';

export interface BrokerPools {
  /** The pool for `url`; `parked` selects the uncapped pool for `wait=true` pops. */
  get(url: string, parked: boolean): Pool;
  /**
   * Takes one of the tenant's places on the request pool of `url`: false when the tenant already
   * has its share in flight there. Every true must be matched by one leave().
   */
  enter(url: string, tenant: string): boolean;
  /** Gives back a place taken by enter(). */
  leave(url: string, tenant: string): void;
  /** Requests per tenant that one broker's request pool takes at once. */
  readonly tenantCap: number;
  /** Closes, once their requests in flight end, the pools of brokers not in `urls`. */
  retain(urls: ReadonlySet<string>): void;
  close(): Promise<void>;
}

export function createBrokerPools(cfg: RawConfig['upstream']): BrokerPools {
  const requests = new Map<string, Pool>();
  const parkedPools = new Map<string, Pool>();
  /** Requests in flight per broker, then per tenant; entries leave at zero. */
  const held = new Map<string, Map<string, number>>();
  // At least one, so a small pool still serves every tenant.
  const cap = Math.max(1, Math.floor(cfg.connections * cfg.tenantShare));
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
    tenantCap: cap,
    get(url: string, parked: boolean): Pool {
      const map = parked ? parkedPools : requests;
      let pool = map.get(url);
      if (!pool) {
        pool = open(url, parked ? null : cfg.connections);
        map.set(url, pool);
      }
      return pool;
    },
    enter(url: string, tenant: string): boolean {
      let tenants = held.get(url);
      if (tenants === undefined) held.set(url, (tenants = new Map()));
      const n = tenants.get(tenant) ?? 0;
      if (n >= cap) return false;
      tenants.set(tenant, n + 1);
      return true;
    },
    leave(url: string, tenant: string): void {
      const tenants = held.get(url);
      const n = tenants?.get(tenant);
      if (tenants === undefined || n === undefined) return;
      if (n > 1) tenants.set(tenant, n - 1);
      else {
        tenants.delete(tenant);
        if (tenants.size === 0) held.delete(url);
      }
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
