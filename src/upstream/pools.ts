/**
 * Keep-alive undici Pools per broker (docs/architecture.md), created on first use (the broker set can
 * change at runtime through tenant records) and kept until close().
 *
 * Parked long polls get a pool of their own with no connection cap: each holds its connection
 * for up to the long-poll timeout, so under the request pool's cap the poll beyond it would wait
 * inside undici and then park for its whole timeout again. They are bounded per tenant by the
 * plan's `parkedPolls` instead.
 *
 * The request pool of a broker several tenants list (tenancy-aware tenants only: docs/tenancy.md)
 * is shared by them, so each tenant may have only its share of it in flight (`upstream.tenantShare` of `connections`, docs/clusters.md): one tenant's
 * slow requests cannot take every connection and leave the others queued inside undici. A
 * tenant's requests beyond its share wait in a queue of its own (HAProxy's `maxconn` per server),
 * at most `connections` of them and for at most `requestTimeoutMs`; beyond that they are refused.
 */
import { Pool } from 'undici';
import type { RawConfig } from '../config/schema.js';

export interface BrokerPools {
  /** The pool for `url`; `parked` selects the uncapped pool for `wait=true` pops. */
  get(url: string, parked: boolean): Pool;
  /**
   * Takes one of the tenant's places on the request pool of `url`: true at once while the tenant
   * has fewer than its share in flight there, else a promise that resolves true when a place is
   * handed over, in order of arrival, or false when the wait timed out; false at once when the
   * tenant's queue is full. Every true must be matched by one leave().
   */
  enter(url: string, tenant: string): boolean | Promise<boolean>;
  /** Gives back a place taken by enter(), to the tenant's next waiting request if there is one. */
  leave(url: string, tenant: string): void;
  /** Requests per tenant that one broker's request pool takes at once. */
  readonly tenantCap: number;
  /** Closes, once their requests in flight end, the pools of brokers not in `urls`. */
  retain(urls: ReadonlySet<string>): void;
  close(): Promise<void>;
}

/** A request waiting for one of its tenant's places. */
interface Waiter {
  readonly resolve: (entered: boolean) => void;
  readonly timer: NodeJS.Timeout;
}

/** One tenant's places on one broker's request pool. */
interface Share {
  inflight: number;
  /** In order of arrival. */
  readonly waiting: Waiter[];
}

export function createBrokerPools(cfg: RawConfig['upstream']): BrokerPools {
  const requests = new Map<string, Pool>();
  const parkedPools = new Map<string, Pool>();
  /** Places per broker, then per tenant; entries leave when nothing is in flight or waiting. */
  const held = new Map<string, Map<string, Share>>();
  // At least one, so a small pool still serves every tenant.
  const cap = Math.max(1, Math.floor(cfg.connections * cfg.tenantShare));
  const drop = (url: string, tenant: string, share: Share): void => {
    if (share.inflight > 0 || share.waiting.length > 0) return;
    const tenants = held.get(url);
    tenants?.delete(tenant);
    if (tenants?.size === 0) held.delete(url);
  };
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
    enter(url: string, tenant: string): boolean | Promise<boolean> {
      let tenants = held.get(url);
      if (tenants === undefined) {
        tenants = new Map();
        held.set(url, tenants);
      }
      let share = tenants.get(tenant);
      if (share === undefined) {
        share = { inflight: 0, waiting: [] };
        tenants.set(tenant, share);
      }
      if (share.inflight < cap) {
        share.inflight++;
        return true;
      }
      if (share.waiting.length >= cfg.connections) return false;
      const s = share;
      return new Promise<boolean>((resolve) => {
        const waiter: Waiter = {
          resolve,
          timer: setTimeout(() => {
            s.waiting.splice(s.waiting.indexOf(waiter), 1);
            drop(url, tenant, s);
            resolve(false);
          }, cfg.requestTimeoutMs),
        };
        s.waiting.push(waiter);
      });
    },
    leave(url: string, tenant: string): void {
      const share = held.get(url)?.get(tenant);
      if (share === undefined) return;
      const next = share.waiting.shift();
      if (next !== undefined) {
        clearTimeout(next.timer);
        next.resolve(true);
        return;
      }
      share.inflight--;
      drop(url, tenant, share);
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
      for (const tenants of held.values()) {
        for (const share of tenants.values()) {
          for (const w of share.waiting.splice(0)) {
            clearTimeout(w.timer);
            w.resolve(false);
          }
        }
      }
      const all = [...requests.values(), ...parkedPools.values()];
      requests.clear();
      parkedPools.clear();
      await Promise.all(all.map((p) => p.close().catch(() => p.destroy())));
    },
  };
}
