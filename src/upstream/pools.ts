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
 * is shared by them, and its places are shared fairly (docs/clusters.md, "Sharing a broker"):
 *
 * - each tenant may have only its share of it in flight (`upstream.tenantShare` of `connections`),
 *   so one tenant's slow requests cannot take every connection;
 * - the last `reservedShare` of the connections go only to tenants with fewer than `reservedFor`
 *   requests in flight there, so tenants holding many, however many of them, together leave those
 *   to the tenants holding few;
 * - the edge never sends more than `connections` at once to a shared broker: a request that may
 *   not have a place waits in its tenant's own queue (HAProxy's `maxconn` per server), at most
 *   `connections` of them and for at most `requestTimeoutMs`, beyond that it is refused; a place
 *   given back goes to the waiting tenant with the fewest in flight that may take it (max-min).
 */
import { Pool } from 'undici';
import type { RawConfig } from '../config/schema.js';

export interface BrokerPools {
  /** The pool for `url`; `parked` selects the uncapped pool for `wait=true` pops. */
  get(url: string, parked: boolean): Pool;
  /**
   * Takes one of the tenant's places on the request pool of `url`: true at once while the tenant
   * may take one (mayTake), else a promise that resolves true when a place is handed over (to the
   * tenant's requests in order of arrival), or false when the wait timed out; false at once when
   * the tenant's queue is full. Every true must be matched by one leave().
   */
  enter(url: string, tenant: string): boolean | Promise<boolean>;
  /** Gives back a place taken by enter(), to a waiting request if one may take it (the fewest in flight first). */
  leave(url: string, tenant: string): void;
  /** Requests per tenant that one broker's request pool takes at once. */
  readonly tenantCap: number;
  /** Closes, once their requests in flight end, the pools of these brokers. */
  drop(urls: Iterable<string>): void;
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

/** One shared broker's places: in flight and waiting, over all its tenants. */
interface Places {
  inflight: number;
  waiting: number;
  readonly tenants: Map<string, Share>;
}

/** Whether a tenant holding `share` may take one more place: the pure rule of the places (docs/clusters.md). */
export function mayTake(
  share: { readonly inflight: number },
  places: { readonly inflight: number },
  rule: { readonly cap: number; readonly connections: number; readonly reserved: number; readonly reservedFor: number },
): boolean {
  if (share.inflight >= rule.cap) return false;
  if (places.inflight < rule.connections - rule.reserved) return true;
  return share.inflight < rule.reservedFor && places.inflight < rule.connections;
}

export function createBrokerPools(cfg: RawConfig['upstream']): BrokerPools {
  const requests = new Map<string, Pool>();
  const parkedPools = new Map<string, Pool>();
  /** Places per broker, then per tenant; entries leave when nothing is in flight or waiting. */
  const held = new Map<string, Places>();
  const rule = {
    // At least one, so a small pool still serves every tenant.
    cap: Math.max(1, Math.floor(cfg.connections * cfg.tenantShare)),
    connections: cfg.connections,
    reserved: Math.floor(cfg.connections * cfg.reservedShare),
    reservedFor: cfg.reservedFor,
  };
  const cap = rule.cap;
  const drop = (url: string, places: Places, tenant: string, share: Share): void => {
    if (share.inflight > 0 || share.waiting.length > 0) return;
    places.tenants.delete(tenant);
    if (places.tenants.size === 0) held.delete(url);
  };
  /** A place was given back: to the waiting tenant with the fewest in flight that may take it. */
  const handOver = (places: Places): void => {
    if (places.waiting === 0) return;
    let next: Share | undefined;
    for (const share of places.tenants.values()) {
      if (share.waiting.length > 0 && (next === undefined || share.inflight < next.inflight) && mayTake(share, places, rule)) next = share;
    }
    if (next === undefined) return;
    const w = next.waiting.shift()!;
    places.waiting--;
    next.inflight++;
    places.inflight++;
    clearTimeout(w.timer);
    w.resolve(true);
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
      let places = held.get(url);
      if (places === undefined) {
        places = { inflight: 0, waiting: 0, tenants: new Map() };
        held.set(url, places);
      }
      let share = places.tenants.get(tenant);
      if (share === undefined) {
        share = { inflight: 0, waiting: [] };
        places.tenants.set(tenant, share);
      }
      if (share.waiting.length === 0 && mayTake(share, places, rule)) {
        share.inflight++;
        places.inflight++;
        return true;
      }
      if (share.waiting.length >= cfg.connections) return false;
      const [p, s] = [places, share];
      return new Promise<boolean>((resolve) => {
        const waiter: Waiter = {
          resolve,
          timer: setTimeout(() => {
            s.waiting.splice(s.waiting.indexOf(waiter), 1);
            p.waiting--;
            drop(url, p, tenant, s);
            resolve(false);
          }, cfg.requestTimeoutMs),
        };
        s.waiting.push(waiter);
        p.waiting++;
      });
    },
    leave(url: string, tenant: string): void {
      const places = held.get(url);
      const share = places?.tenants.get(tenant);
      if (places === undefined || share === undefined) return;
      share.inflight--;
      places.inflight--;
      handOver(places);
      drop(url, places, tenant, share);
    },
    drop(urls: Iterable<string>): void {
      for (const url of urls) {
        for (const map of [requests, parkedPools]) {
          const pool = map.get(url);
          if (pool === undefined) continue;
          map.delete(url);
          void pool.close().catch(() => pool.destroy());
        }
      }
    },
    async close(): Promise<void> {
      for (const places of held.values()) {
        for (const share of places.tenants.values()) {
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
