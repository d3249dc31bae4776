/**
 * The broker selector the pipeline calls (docs/architecture.md): each tenant's ring of brokers, their
 * health, in-flight counts for bounded loads, and the lease map. The hot path (pick, begin, end)
 * is synchronous and allocation-free; rings are built once per broker list.
 */
import type { RawConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { BrokerChange } from '../tenants/broker-moves.js';
import type { Tenant } from '../tenants/model.js';
import { createHealthChecker, type FailureKind, type HealthChange, type HealthChecker, type Probe } from './health.js';
import { LeaseMap } from './leases.js';
import { ringLookup, type RingHash } from './ring.js';
import { RingCache, type BuiltRing } from './ring-cache.js';

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

/** One broker as readiness and the metrics see it, whichever tenants list it. */
export interface BrokerLoad {
  readonly url: string;
  readonly healthy: boolean;
  readonly inflight: number;
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
  /** True while at least one of the tenant's brokers is healthy; no placement. */
  reachable(tenant: Tenant): boolean;
  /** True while `url` is one of the tenant's brokers and healthy to it (a broker removed since its object was made is down). */
  usable(tenant: Tenant, url: string): boolean;
  /** The brokers tracked now, in O(brokers) whatever the number of tenants (readiness, metrics). */
  brokers(): BrokerLoad[];
  /**
   * The directory's broker URLs changed (it counts the tenants listing each): tracks the `added`
   * ones, and for the `removed` ones stops the health checks and drops the live counters, in
   * O(changed). A tenant object from before the change (held by a request in flight) does not
   * bring a removed broker back: to it, that broker is down. Rings go with the last tenant object
   * using them (ring-cache.ts).
   */
  follow(change: BrokerChange): void;
  /**
   * Makes `tenants` the current set: their brokers are tracked, the others removed as by follow().
   * One pass over the tenants: the start, not the changes.
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

/** A tenant's view: its ring, its brokers' states (index-aligned), its round-robin cursor. */
interface TenantEntry {
  readonly built: BuiltRing;
  states: readonly BrokerState[];
  /** The tracking generation `states` were checked in; a broker removed then may be tracked again since. */
  generation: number;
  cursor: number;
}

const NO_STATES: readonly BrokerState[] = Object.freeze([]);

/**
 * Removed broker URLs remembered, so that a tenant object from before their removal, first seen
 * after it, does not track them again. The oldest are forgotten first: a request holds its tenant
 * object for seconds, while this many removals take far longer on any directory.
 */
const MAX_REMOVED = 10_000;

/** Creates the selector; call start() with the tenants to begin health checks. */
export function createClusters(cfg: ClustersConfig, deps: ClustersDeps): Clusters {
  return new RingClusters(cfg, deps);
}

class RingClusters implements Clusters {
  readonly #health: HealthChecker;
  readonly #leases: LeaseMap;
  /** The tracked brokers: those the directory lists, and those of tenants seen that it did not announce. */
  readonly #states = new Map<string, BrokerState>();
  readonly #rings: RingCache;
  readonly #tenants = new WeakMap<Tenant, TenantEntry>();
  readonly #unsubscribe: () => void;
  readonly #ringHash: RingHash;
  /** Counts the brokers tracked: an entry may hold the state of one removed and tracked again since. */
  #generation = 0;
  /**
   * Brokers removed and not listed again, oldest first (MAX_REMOVED), with their last state: down,
   * and counting the requests still in flight there as they end. Only follow() tracks them again.
   */
  readonly #removed = new Map<string, BrokerState>();
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
    this.#rings = new RingCache(this.#ringHash);
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
    if (url === undefined || exclude?.has(url)) return undefined;
    return this.usable(tenant, url) ? url : undefined;
  }

  usable(tenant: Tenant, url: string): boolean {
    const i = tenant.brokers.indexOf(url);
    // The tenant's own view: a broker removed since its object was made is down to it.
    return i >= 0 && this.#entry(tenant).states[i]!.healthy;
  }

  begin(url: string): void {
    const s = this.#counted(url);
    if (s !== undefined) s.inflight++;
  }

  end(url: string): void {
    const s = this.#counted(url);
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

  reachable(tenant: Tenant): boolean {
    return this.#entry(tenant).states.some((s) => s.healthy);
  }

  brokers(): BrokerLoad[] {
    return Array.from(this.#states.values(), (s) => ({ url: s.url, healthy: s.healthy, inflight: s.inflight }));
  }

  follow(change: BrokerChange): void {
    for (const url of change.removed) {
      // Entries holding this state keep it, down for good: a later tracking makes a new one.
      const s = this.#states.get(url) ?? { url, healthy: false, inflight: 0, picks: 0 };
      s.healthy = false;
      this.#states.delete(url);
      this.#health.untrack(url);
      this.#removed.delete(url);
      this.#removed.set(url, s);
      if (this.#removed.size > MAX_REMOVED) this.#removed.delete(this.#removed.keys().next().value!);
    }
    for (const url of change.added) {
      // The requests begun before the removal still end on the new state: it counts them.
      const before = this.#removed.get(url);
      this.#removed.delete(url);
      if (!this.#states.has(url)) this.#track(url, before?.inflight ?? 0);
    }
  }

  sync(tenants: Iterable<Tenant>): void {
    const urls = new Set<string>();
    for (const t of tenants) for (const b of t.brokers) urls.add(b);
    this.follow({
      added: [...urls].filter((url) => !this.#states.has(url)),
      removed: [...this.#states.keys()].filter((url) => !urls.has(url)),
    });
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
   * The tenant's entry, built on first sight of this tenant object (a change makes a new one).
   * After a broker was tracked, an entry holding a removed broker's state takes the live one if it
   * is tracked again (the directory may lend an old object anew); the hot path pays one integer compare.
   */
  #entry(tenant: Tenant): TenantEntry {
    const e = this.#tenants.get(tenant);
    if (e !== undefined) {
      if (e.generation !== this.#generation) this.#relink(e);
      return e;
    }
    const states = Object.freeze(tenant.brokers.map((url) => this.#state(url)));
    const created: TenantEntry = { built: this.#rings.ringOf(tenant.brokers), states, generation: this.#generation, cursor: 0 };
    this.#tenants.set(tenant, created);
    return created;
  }

  #relink(e: TenantEntry): void {
    e.generation = this.#generation;
    const relive = (s: BrokerState): BrokerState => this.#states.get(s.url) ?? s;
    if (e.states.some((s) => relive(s) !== s)) e.states = Object.freeze(e.states.map(relive));
  }

  /**
   * The live state of `url`. A removed broker's, for a tenant object from before its removal, is
   * down and untracked; a broker never announced (a tenant not from the directory) is tracked.
   */
  #state(url: string): BrokerState {
    return this.#counted(url) ?? this.#track(url);
  }

  /** The state counting the requests to `url`: the live one, or a removed broker's. */
  #counted(url: string): BrokerState | undefined {
    return this.#states.get(url) ?? this.#removed.get(url);
  }

  #track(url: string, inflight = 0): BrokerState {
    this.#health.track([url]);
    const s: BrokerState = { url, healthy: this.#health.isHealthy(url), inflight, picks: 0 };
    this.#states.set(url, s);
    this.#generation++;
    return s;
  }
}
