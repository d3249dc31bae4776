/**
 * The broker selector the pipeline calls (docs/architecture.md): each tenant's ring of brokers, their
 * health, in-flight counts for bounded loads, and the lease map. The hot path (pick, begin, end)
 * is synchronous and allocation-free; rings are built once per broker list.
 */
import type { RawConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { Tenant } from '../tenants/model.js';
import { createHealthChecker, type FailureKind, type HealthChange, type HealthChecker, type Probe } from './health.js';
import { LeaseMap } from './leases.js';
import { buildRing, ringLookup, ringShares, type Ring, type RingHash } from './ring.js';

/** One broker of a tenant, as the admin API shows it. */
export interface BrokerStats {
  url: string;
  healthy: boolean;
  /** Requests between begin() and end() now, across every tenant that lists this URL. */
  inflight: number;
  /** Times pick() chose this broker since start, across tenants: how the lanes actually fell. */
  picks: number;
  /** Fraction of this tenant's ring (the 32-bit key space) the broker owns when all are healthy. */
  keyShare: number;
  /** The broker's last health change, null if it has been healthy since it was first seen. */
  lastChange: HealthChange | null;
}

/** A tenant's brokers, for `GET /admin/v1/brokers`. */
export interface ClusterSnapshot {
  tenant: string;
  brokers: BrokerStats[];
  boundedLoadFactor: number | null;
  /** How the ring places lanes (`upstream.ringHash`). */
  ringHash: RingHash;
}

/** The `upstream:` keys the selector reads. */
export type ClustersConfig = Pick<RawConfig['upstream'], 'healthIntervalMs' | 'healthTimeoutMs' | 'downAfter' | 'upAfter'> &
  Partial<Pick<RawConfig['upstream'], 'ringHash'>>;

/** Collaborators of the selector. */
export interface ClustersDeps {
  log: Logger;
  clock?: () => number;
  /** Replaces the default HTTP health probe. */
  probe?: Probe;
  /** Lease map bounds (defaults: 10 minutes, 100,000 entries). */
  leases?: { ttlMs?: number; maxEntries?: number };
}

/** Broker selection for every tenant. */
export interface Clusters {
  /**
   * Broker for a lane key on the tenant's ring: healthy brokers only, skipping `exclude` (brokers
   * this request already tried) and, with a boundedLoadFactor, brokers over the bounded load.
   * laneKey null: any such broker, round robin. undefined: no healthy broker is left.
   */
  pick(tenant: Tenant, laneKey: string | null, exclude?: ReadonlySet<string> | null): string | undefined;
  /** Remembers the broker a pop response's leaseId came from. */
  learnLease(leaseId: string, url: string): void;
  /**
   * The broker that served `leaseId`, when it is one of this tenant's brokers (a leaseId from
   * another tenant must not steer a request to that tenant's brokers), healthy and not excluded.
   * undefined: the caller picks with a null lane.
   */
  brokerForLease(tenant: Tenant, leaseId: string, exclude?: ReadonlySet<string> | null): string | undefined;
  /** A request to `url` starts (in-flight counting for bounded loads and visibility). */
  begin(url: string): void;
  /** A request to `url` ended, whatever the outcome. */
  end(url: string): void;
  /** Passive health: see HealthChecker.reportFailure. */
  reportFailure(url: string, kind: FailureKind): void;
  /** Passive health: see HealthChecker.reportSuccess. */
  reportSuccess(url: string): void;
  /** The rings and health of the given tenants. */
  snapshot(tenants: Iterable<Tenant>): ClusterSnapshot[];
  /**
   * Makes `tenants` the current set: tracks their brokers, and for brokers none of them lists any
   * more stops the health checks, drops the live counters and the rings no current tenant uses.
   * The tenant directory calls it on every change. A tenant object from before the change (held
   * by a request in flight) does not bring a dropped broker back: to it, that broker is down.
   */
  sync(tenants: Iterable<Tenant>): void;
  /** sync(tenants), then starts the active health checks. */
  start(tenants: Iterable<Tenant>): void;
  /** Stops the health checks. */
  close(): Promise<void>;
}

/** Live counters of one broker URL, shared by every tenant (and ring) listing it. */
interface BrokerState {
  readonly url: string;
  healthy: boolean;
  inflight: number;
  picks: number;
}

/** A built ring and its key shares, shared by tenants with the same broker list. */
interface BuiltRing {
  readonly ring: Ring;
  readonly shares: readonly number[];
}

/** A tenant's view: its ring, its brokers' states (index-aligned), its round-robin cursor. */
interface TenantEntry {
  readonly built: BuiltRing;
  states: readonly BrokerState[];
  /** The sync() generation `states` were taken in; sync() may have dropped some since. */
  generation: number;
  cursor: number;
}

const NO_STATES: readonly BrokerState[] = Object.freeze([]);

/** Creates the selector; call start() with the tenants to begin health checks. */
export function createClusters(cfg: ClustersConfig, deps: ClustersDeps): Clusters {
  return new RingClusters(cfg, deps);
}

class RingClusters implements Clusters {
  readonly #health: HealthChecker;
  readonly #leases: LeaseMap;
  readonly #states = new Map<string, BrokerState>();
  readonly #rings = new Map<string, BuiltRing>();
  readonly #tenants = new WeakMap<Tenant, TenantEntry>();
  readonly #unsubscribe: () => void;
  readonly #ringHash: RingHash;
  #generation = 0;
  /** Brokers the last sync() dropped; only a later sync() that lists them again tracks them. */
  #dropped: ReadonlySet<string> = new Set();
  /** The tenant objects the last sync() was given. */
  #current: WeakSet<Tenant> = new WeakSet();
  // The candidate filter of the pick in progress. pick() is synchronous, so one reusable
  // predicate reading these fields replaces a closure per request.
  #cand: readonly BrokerState[] = NO_STATES;
  #exclude: ReadonlySet<string> | null = null;
  #limit = Infinity;
  readonly #accept = (i: number): boolean => {
    const s = this.#cand[i]!;
    return s.healthy && s.inflight + 1 <= this.#limit && (this.#exclude === null || !this.#exclude.has(s.url));
  };

  constructor(cfg: ClustersConfig, deps: ClustersDeps) {
    this.#ringHash = cfg.ringHash ?? 'sdk';
    this.#health = createHealthChecker({
      intervalMs: cfg.healthIntervalMs,
      timeoutMs: cfg.healthTimeoutMs,
      downAfter: cfg.downAfter,
      upAfter: cfg.upAfter,
      log: deps.log,
      ...(deps.clock ? { clock: deps.clock } : {}),
      ...(deps.probe ? { probe: deps.probe } : {}),
    });
    this.#leases = new LeaseMap({ ...deps.leases, ...(deps.clock ? { clock: deps.clock } : {}) });
    this.#unsubscribe = this.#health.onChange((c) => {
      const s = this.#states.get(c.url);
      if (s !== undefined) s.healthy = c.healthy;
    });
  }

  pick(tenant: Tenant, laneKey: string | null, exclude: ReadonlySet<string> | null = null): string | undefined {
    const e = this.#entry(tenant);
    const states = e.states;
    let limit = Infinity;
    const c = tenant.boundedLoadFactor;
    if (c !== null) {
      // Bounded loads (Mirrokni, Thorup, Zadimoghaddam): capacity ceil(c × (m + 1) / n) for m
      // requests in flight on n healthy brokers, counting the one being placed.
      let total = 0;
      let healthy = 0;
      for (let i = 0; i < states.length; i++) {
        const s = states[i]!;
        if (s.healthy) {
          healthy++;
          total += s.inflight;
        }
      }
      if (healthy === 0) return undefined;
      limit = Math.ceil((c * (total + 1)) / healthy);
    }
    this.#cand = states;
    this.#exclude = exclude;
    this.#limit = limit;
    let i = this.#choose(e, laneKey);
    // With c > 1 some healthy broker is always under capacity, but `exclude` may have removed it:
    // a retry still deserves a broker, so drop the bound rather than answer no_upstream.
    if (i < 0 && limit !== Infinity) {
      this.#limit = Infinity;
      i = this.#choose(e, laneKey);
    }
    this.#cand = NO_STATES;
    this.#exclude = null;
    if (i < 0) return undefined;
    const s = states[i]!;
    s.picks++;
    return s.url;
  }

  learnLease(leaseId: string, url: string): void {
    this.#leases.learn(leaseId, url);
  }

  brokerForLease(tenant: Tenant, leaseId: string, exclude: ReadonlySet<string> | null = null): string | undefined {
    const url = this.#leases.brokerFor(leaseId);
    if (url === undefined || !tenant.brokers.includes(url) || exclude?.has(url)) return undefined;
    return this.#states.get(url)?.healthy === false ? undefined : url;
  }

  begin(url: string): void {
    const s = this.#states.get(url);
    if (s !== undefined) s.inflight++;
  }

  end(url: string): void {
    const s = this.#states.get(url);
    if (s !== undefined && s.inflight > 0) s.inflight--;
  }

  reportFailure(url: string, kind: FailureKind): void {
    this.#health.reportFailure(url, kind);
  }

  reportSuccess(url: string): void {
    this.#health.reportSuccess(url);
  }

  snapshot(tenants: Iterable<Tenant>): ClusterSnapshot[] {
    const out: ClusterSnapshot[] = [];
    for (const t of tenants) {
      const e = this.#entry(t);
      out.push({
        tenant: t.id,
        boundedLoadFactor: t.boundedLoadFactor,
        ringHash: this.#ringHash,
        brokers: e.states.map((s, i) => ({
          url: s.url,
          healthy: s.healthy,
          inflight: s.inflight,
          picks: s.picks,
          keyShare: e.built.shares[i]!,
          lastChange: this.#health.lastChange(s.url) ?? null,
        })),
      });
    }
    return out;
  }

  sync(tenants: Iterable<Tenant>): void {
    // Read once: the directory may hand over a one-shot iterator.
    const list = [...tenants];
    this.#generation++;
    const urls = new Set<string>();
    const lists = new Set<string>();
    const current = new WeakSet<Tenant>();
    for (const t of list) {
      current.add(t);
      for (const b of t.brokers) urls.add(b);
      lists.add(ringKey(t.brokers));
    }
    this.#current = current;
    const dropped = new Set<string>();
    for (const url of this.#states.keys()) {
      if (urls.has(url)) continue;
      dropped.add(url);
      this.#health.untrack(url);
      this.#states.delete(url);
    }
    this.#dropped = dropped;
    for (const key of this.#rings.keys()) if (!lists.has(key)) this.#rings.delete(key);
    for (const t of list) this.#entry(t);
  }

  start(tenants: Iterable<Tenant>): void {
    this.sync(tenants);
    this.#health.start();
  }

  async close(): Promise<void> {
    this.#unsubscribe();
    await this.#health.close();
  }

  #choose(e: TenantEntry, laneKey: string | null): number {
    if (laneKey !== null) return ringLookup(e.built.ring, laneKey, this.#accept);
    const n = e.states.length;
    for (let k = 0; k < n; k++) {
      const i = (e.cursor + k) % n;
      if (this.#accept(i)) {
        e.cursor = (i + 1) % n;
        return i;
      }
    }
    return -1;
  }

  /**
   * The tenant's entry, built on first sight of this tenant object (a reload makes a new one) and
   * re-linked to live broker states after a sync(), which costs the hot path one integer compare.
   * A tenant object the last sync() left out gets no new tracking for brokers that sync dropped.
   */
  #entry(tenant: Tenant): TenantEntry {
    const e = this.#tenants.get(tenant);
    if (e !== undefined && e.generation === this.#generation) return e;
    const stale = this.#dropped.size > 0 && !this.#current.has(tenant) && tenant.brokers.some((url) => this.#dropped.has(url));
    const states = Object.freeze(tenant.brokers.map((url) => (stale && this.#dropped.has(url) ? droppedState(url) : this.#state(url))));
    if (!stale) this.#health.track(tenant.brokers);
    if (e !== undefined) {
      e.states = states;
      e.generation = this.#generation;
      return e;
    }
    const key = ringKey(tenant.brokers);
    let built = this.#rings.get(key);
    if (built === undefined) {
      const ring = buildRing(tenant.brokers, this.#ringHash);
      built = Object.freeze({ ring, shares: Object.freeze(ringShares(ring)) });
      // A stale tenant's ring is not kept: no current tenant uses it.
      if (!stale) this.#rings.set(key, built);
    }
    const created: TenantEntry = { built, states, generation: this.#generation, cursor: 0 };
    this.#tenants.set(tenant, created);
    return created;
  }

  #state(url: string): BrokerState {
    let s = this.#states.get(url);
    if (s === undefined) {
      s = { url, healthy: this.#health.isHealthy(url), inflight: 0, picks: 0 };
      this.#states.set(url, s);
    }
    return s;
  }
}

/** A broker a sync() dropped, as a tenant object from before it sees it: down, untracked. */
function droppedState(url: string): BrokerState {
  return { url, healthy: false, inflight: 0, picks: 0 };
}

/** Cache key of a broker list; a newline cannot occur in a validated URL. */
function ringKey(brokers: readonly string[]): string {
  return brokers.join('\n');
}
