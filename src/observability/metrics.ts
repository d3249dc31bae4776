/**
 * Prometheus metrics (docs/operating.md) on a registry owned by app.ts, never prom-client's global one.
 *
 * Hot path: request() and parked() bump plain counters in nested Maps keyed by strings the
 * pipeline already holds (tenant id, route name, code), so a request allocates nothing here;
 * prom-client's own label hashing runs only at scrape time, in collect(). The two latency
 * histograms are RouteHistograms: prom-client's observe() validates and hashes its label object
 * on every call, which the bench profile put at 2 µs per request.
 *
 * Cardinality: labels are tenant ids, route names, error codes, status classes and configured
 * broker URLs: all bounded by the configuration, never by client input (no queue names, no paths).
 * Tenant ids are bounded further by `metrics.tenantLabels` (tenant-labels.ts): past its slots,
 * tenants are counted under `_other`, so the series do not grow with the tenant list.
 */
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import type { ErrorCode } from '../errors.js';
import { redactUserInfo } from '../net/redact-url.js';
import { foldByLabel, TenantLabels, tenantLabelSlots } from './tenant-labels.js';

/** What the limiter decided for a request: admitted, its refusal code, or null (not consulted). */
export type LimitOutcome = 'admitted' | ErrorCode | null;

/** The pipeline's side of metrics. */
export interface RequestMetrics {
  /**
   * One finished request. tenant/route null when unknown at refusal; status 0 when no response
   * started; upstreamMs 0 when nothing was forwarded.
   */
  request(
    tenantId: string | null,
    route: string | null,
    status: number,
    code: ErrorCode | null,
    totalMs: number,
    upstreamMs: number,
    limit: LimitOutcome,
  ): void;
  /** A parked (wait=true) pop started (+1) or ended (-1). */
  parked(tenantId: string, delta: 1 | -1): void;
}

/**
 * Live state read at scrape time. Declared here by what the gauges read (the upstream clusters'
 * snapshot, the meter's counts and flush stats fit it), so observability imports neither folder
 * that logs through it.
 */
export interface MetricSources {
  limiterMode(): string;
  brokers(): readonly { readonly brokers: readonly { readonly url: string; readonly healthy: boolean; readonly inflight: number }[] }[];
  usage(): ReadonlyMap<string, UsageTotals>;
  flush(): {
    readonly flushes: number;
    readonly failures: number;
    readonly lagMs: number;
    /** Usage held unflushed (tenant-hours and their requests), and what a full buffer dropped; absent: zero. */
    readonly bufferedEntries?: number;
    readonly bufferedRequests?: number;
    readonly bufferCapacity?: number;
    readonly dropped?: UsageTotals;
  };
  /** Times Redis was found emptied and month counters re-seeded from the ledger (redis/epoch.ts); absent: zero. */
  redisEpoch?(): { readonly emptied: number; readonly reseededTenants: number };
  /** The HTTPS listener's certificates (listen/tls.ts); absent: the expiry family stays empty. */
  certificates?(): readonly { readonly certificate: string; readonly names: string; readonly notAfterMs: number }[];
  /** Failed JWKS fetches by JWKS URL, since the start (auth/jwt.ts); absent: the family stays empty. */
  jwksFailures?(): ReadonlyMap<string, number>;
  /** When this instance last knew it had heard of every API key revocation (Date.now() ms); absent: no gauge value. */
  keyRevocationsCheckedAt?(): number;
  /** Whether the durable store answered its last statement; null or absent: no store configured, the family stays empty. */
  storeUp?(): boolean | null;
  /** Configuration reloads (reloads.ts); absent: the reload families stay empty. */
  reloads?(): {
    readonly lastAtMs: number;
    readonly last: { readonly result: 'applied' | 'refused' } | null;
    readonly counts: Readonly<Record<'applied' | 'refused', number>>;
    readonly restartNeeded: readonly string[];
  };
}

/** A tenant's metered totals as the usage counters read them. */
export interface UsageTotals {
  readonly requests: number;
  readonly messagesPushed: number;
  readonly messagesDelivered: number;
  readonly acks: number;
  readonly ingressBytes: number;
  readonly egressBytes: number;
}

/** The process's metrics: the pipeline hooks plus the registry and its text. */
export interface EdgeMetrics extends RequestMetrics {
  readonly registry: Registry;
  /** The `tenant` label value of a tenant id (its own, or `_other` past the slots). */
  readonly tenantLabels: TenantLabels;
  /** A Redis client reported an error (connection loss, timeout). */
  redisError(client: string): void;
  /** The exposition text of this process's registry. */
  text(): Promise<string>;
}

const LIMITER_MODES = ['redis', 'memory', 'open', 'closed', 'local'] as const;
const STATUS_CLASSES = ['none', '1xx', '2xx', '3xx', '4xx', '5xx'] as const;
const NO_TENANT = '-';
/** metrics.tenantLabels' default (config/schema.ts). */
export const DEFAULT_TENANT_LABELS = 'first:100';
/** Latency buckets in seconds: 50 µs (overhead) to 60 s (a parked poll). */
const LATENCY_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** Counts keyed by up to four label values, in nested Maps (no key string built per call). */
class Tally {
  readonly #root = new Map<string, Map<string, Map<string, Map<string, number>>>>();

  inc(a: string, b: string, c: string, d: string, n: number): void {
    let m1 = this.#root.get(a);
    if (!m1) {
      m1 = new Map();
      this.#root.set(a, m1);
    }
    let m2 = m1.get(b);
    if (!m2) {
      m2 = new Map();
      m1.set(b, m2);
    }
    let m3 = m2.get(c);
    if (!m3) {
      m3 = new Map();
      m2.set(c, m3);
    }
    m3.set(d, (m3.get(d) ?? 0) + n);
  }

  forEach(fn: (a: string, b: string, c: string, d: string, n: number) => void): void {
    for (const [a, m1] of this.#root) for (const [b, m2] of m1) for (const [c, m3] of m2) for (const [d, n] of m3) fn(a, b, c, d, n);
  }
}

/**
 * A histogram family with one label, `route`: observe() finds the bucket and bumps plain numbers;
 * the registry reads it at scrape time through the same get()/reset() it uses for its own
 * metrics, in the same exposition (cumulative `_bucket` with `le`, `_sum`, `_count`).
 */
interface HistogramSample {
  readonly metricName: string;
  readonly labels: Readonly<Record<string, string | number>>;
  readonly value: number;
}

class RouteHistogram {
  readonly aggregator = 'sum' as const;
  readonly #routes = new Map<string, { readonly counts: Float64Array; sum: number; count: number }>();

  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[],
  ) {}

  observe(route: string, value: number): void {
    let h = this.#routes.get(route);
    if (h === undefined) {
      h = { counts: new Float64Array(this.buckets.length), sum: 0, count: 0 };
      this.#routes.set(route, h);
    }
    const b = this.buckets;
    for (let i = 0; i < b.length; i++) {
      if (value <= b[i]!) {
        h.counts[i]!++;
        break;
      }
    }
    h.sum += value;
    h.count++;
  }

  get(): Promise<{ name: string; help: string; type: 'histogram'; values: HistogramSample[]; aggregator: 'sum' }> {
    const values: HistogramSample[] = [];
    for (const [route, h] of this.#routes) {
      let cumulative = 0;
      for (let i = 0; i < this.buckets.length; i++) {
        cumulative += h.counts[i]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { le: this.buckets[i]!, route }, value: cumulative });
      }
      values.push({ metricName: `${this.name}_bucket`, labels: { le: '+Inf', route }, value: h.count });
      values.push({ metricName: `${this.name}_sum`, labels: { route }, value: h.sum });
      values.push({ metricName: `${this.name}_count`, labels: { route }, value: h.count });
    }
    return Promise.resolve({ name: this.name, help: this.help, type: 'histogram', values, aggregator: this.aggregator });
  }

  reset(): void {
    this.#routes.clear();
  }
}

function statusClass(status: number): string {
  const cls = Math.floor(status / 100);
  return cls >= 1 && cls <= 5 ? STATUS_CLASSES[cls]! : STATUS_CLASSES[0];
}

/** What the pipeline recorded since the start, read by the families at scrape time. */
class RequestTallies {
  readonly requests = new Tally();
  readonly decisions = new Tally();
  readonly parkedNow = new Map<string, number>();
  readonly redisErrors = new Map<string, number>();
  readonly overhead = new RouteHistogram(
    'queen_edge_proxy_overhead_seconds',
    'Time spent in the edge per request (total minus upstream), by route name.',
    LATENCY_BUCKETS,
  );
  readonly upstream = new RouteHistogram(
    'queen_edge_upstream_duration_seconds',
    'Time from dispatch to the last relayed byte of forwarded requests, by route name.',
    LATENCY_BUCKETS,
  );
}

/** Registers every queen-edge family (and Node's process metrics) on `registry`. */
export function createMetrics(sources: MetricSources, registry: Registry = new Registry(), tenantLabels = DEFAULT_TENANT_LABELS): EdgeMetrics {
  const labels = new TenantLabels(tenantLabelSlots(tenantLabels), new Set([NO_TENANT, '']));
  const t = new RequestTallies();
  registerRequestFamilies(registry, t);
  registerStateFamilies(registry, sources, t);
  registerMeteringFamilies(registry, sources, labels);
  registerReloadFamilies(registry, sources);
  registerHealthFamilies(registry, sources);
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    tenantLabels: labels,
    request(tenantId, route, status, code, totalMs, upstreamMs, limit) {
      const tenant = tenantId === null ? NO_TENANT : labels.label(tenantId);
      const name = route ?? NO_TENANT;
      t.requests.inc(tenant, name, statusClass(status), code ?? '', 1);
      if (limit !== null) t.decisions.inc(tenant, limit, '', '', 1);
      t.overhead.observe(name, Math.max(0, totalMs - upstreamMs) / 1000);
      if (upstreamMs > 0) t.upstream.observe(name, upstreamMs / 1000);
    },
    parked(tenantId, delta) {
      const tenant = labels.label(tenantId);
      t.parkedNow.set(tenant, (t.parkedNow.get(tenant) ?? 0) + delta);
    },
    redisError(client) {
      t.redisErrors.set(client, (t.redisErrors.get(client) ?? 0) + 1);
    },
    text: () => registry.metrics(),
  };
}

/** Requests, latencies, parked polls and limiter decisions, from what the pipeline recorded. */
function registerRequestFamilies(registry: Registry, t: RequestTallies): void {
  new Counter({
    name: 'queen_edge_requests_total',
    help: 'Requests by tenant, route name, status class and refusal code ("" when not refused).',
    labelNames: ['tenant', 'route', 'status', 'code'] as const,
    registers: [registry],
    collect() {
      this.reset();
      t.requests.forEach((tenant, route, status, code, n) => {
        this.inc({ tenant, route, status, code }, n);
      });
    },
  });
  // prom-client's typings declare a numeric metric type its registry never uses (it reads the string).
  registry.registerMetric(t.overhead as unknown as Parameters<Registry['registerMetric']>[0]);
  registry.registerMetric(t.upstream as unknown as Parameters<Registry['registerMetric']>[0]);
  new Gauge({
    name: 'queen_edge_parked_polls',
    help: 'Long polls (wait=true pops) parked at a broker now, by tenant.',
    labelNames: ['tenant'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [tenant, n] of t.parkedNow) this.set({ tenant }, n);
    },
  });
  new Counter({
    name: 'queen_edge_limiter_decisions_total',
    help: 'Limiter decisions by tenant: admitted or the refusal code.',
    labelNames: ['tenant', 'decision'] as const,
    registers: [registry],
    collect() {
      this.reset();
      t.decisions.forEach((tenant, decision, _c, _d, n) => {
        this.inc({ tenant, decision }, n);
      });
    },
  });
}

/** The limiter mode, workers, brokers and Redis errors: live state read at scrape time. */
function registerStateFamilies(registry: Registry, sources: MetricSources, t: RequestTallies): void {
  new Gauge({
    name: 'queen_edge_limiter_mode',
    help: 'The limiter mode in force (1) and the others (0): redis, memory, or the failMode while Redis is away.',
    labelNames: ['mode'] as const,
    registers: [registry],
    aggregator: 'sum',
    collect() {
      const mode = sources.limiterMode();
      for (const m of LIMITER_MODES) this.set({ mode: m }, m === mode ? 1 : 0);
    },
  });
  new Gauge({
    name: 'queen_edge_workers',
    help: 'Worker processes behind this /metrics: 1 per process, summed by a multi-worker primary.',
    registers: [registry],
    aggregator: 'sum',
    collect() {
      this.set(1);
    },
  });
  new Gauge({
    name: 'queen_edge_broker_up',
    help: 'Broker health as this instance sees it (1 healthy, 0 down), by broker URL.',
    labelNames: ['broker'] as const,
    registers: [registry],
    aggregator: 'min',
    collect() {
      this.reset();
      for (const c of sources.brokers()) for (const b of c.brokers) this.set({ broker: redactUserInfo(b.url) }, b.healthy ? 1 : 0);
    },
  });
  new Gauge({
    name: 'queen_edge_store_up',
    help: 'Whether the durable store (store.url) answered its last statement (1) or not (0); absent without a store. While 0, admin writes answer 503 store_unavailable.',
    registers: [registry],
    aggregator: 'min',
    collect() {
      this.reset();
      const up = sources.storeUp?.() ?? null;
      if (up !== null) this.set(up ? 1 : 0);
    },
  });
  new Gauge({
    name: 'queen_edge_broker_inflight',
    help: 'Requests in flight to a broker now, by broker URL.',
    labelNames: ['broker'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const c of sources.brokers()) for (const b of c.brokers) this.set({ broker: redactUserInfo(b.url) }, b.inflight);
    },
  });
  new Counter({
    name: 'queen_edge_redis_errors_total',
    help: 'Errors reported by Redis clients (connection loss, timeouts), by client.',
    labelNames: ['client'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [client, n] of t.redisErrors) this.inc({ client }, n);
    },
  });
}

/** The usage buffer (counts waiting for the store), what it dropped, and Redis found emptied. */
function registerBufferFamilies(registry: Registry, sources: MetricSources): void {
  new Gauge({
    name: 'queen_edge_usage_buffered_entries',
    help: 'Tenant-hours of usage held unflushed (the buffer store.usageBufferEntries bounds).',
    registers: [registry],
    collect() {
      this.set(sources.flush().bufferedEntries ?? 0);
    },
  });
  new Gauge({
    name: 'queen_edge_usage_buffer_capacity_entries',
    help: 'Tenant-hours the usage buffer holds at most (store.usageBufferEntries); past it counts are dropped.',
    registers: [registry],
    collect() {
      this.set(sources.flush().bufferCapacity ?? 0);
    },
  });
  new Gauge({
    name: 'queen_edge_usage_buffered_requests',
    help: 'Requests counted but not yet in the usage store.',
    registers: [registry],
    collect() {
      this.set(sources.flush().bufferedRequests ?? 0);
    },
  });
  new Counter({
    name: 'queen_edge_usage_dropped_total',
    help: 'Usage counted but dropped because the usage buffer was full, by field (requests, messages, bytes).',
    labelNames: ['field'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const d = sources.flush().dropped;
      if (!d) return;
      for (const [field, n] of Object.entries(DROPPED_FIELDS)) this.inc({ field }, d[n]);
    },
  });
  new Counter({
    name: 'queen_edge_redis_emptied_total',
    help: 'Times Redis was found emptied (its epoch key vanished or changed).',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(sources.redisEpoch?.().emptied ?? 0);
    },
  });
  new Counter({
    name: 'queen_edge_month_counters_reseeded_total',
    help: 'Tenants whose month counters were re-seeded from the usage ledger after Redis lost its data.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(sources.redisEpoch?.().reseededTenants ?? 0);
    },
  });
}

/** The `field` label of queen_edge_usage_dropped_total → the totals' field. */
const DROPPED_FIELDS: Readonly<Record<string, keyof UsageTotals>> = {
  requests: 'requests',
  messages_pushed: 'messagesPushed',
  messages_delivered: 'messagesDelivered',
  acks: 'acks',
  ingress_bytes: 'ingressBytes',
  egress_bytes: 'egressBytes',
};

/** Usage flushes and the metered totals by tenant. */
function registerMeteringFamilies(registry: Registry, sources: MetricSources, labels: TenantLabels): void {
  const label = (id: string) => labels.label(id);
  new Gauge({
    name: 'queen_edge_api_key_revocation_check_age_seconds',
    help: 'Age of the last successful API key revocation check: past 5 s, a revoked key may still pass here for up to this long (at most 30 s, a cache entry).',
    registers: [registry],
    aggregator: 'max',
    collect() {
      const at = sources.keyRevocationsCheckedAt?.();
      if (at !== undefined) this.set(Math.max(0, Date.now() - at) / 1000);
    },
  });
  new Gauge({
    name: 'queen_edge_metering_flush_lag_seconds',
    help: 'Age of the oldest usage count not yet flushed to the usage store.',
    registers: [registry],
    aggregator: 'max',
    collect() {
      this.set(sources.flush().lagMs / 1000);
    },
  });
  new Counter({
    name: 'queen_edge_metering_flushes_total',
    help: 'Usage batches the store acknowledged.',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(sources.flush().flushes);
    },
  });
  new Counter({
    name: 'queen_edge_metering_flush_failures_total',
    help: 'Usage flush attempts that failed (the batch is kept and retried).',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(sources.flush().failures);
    },
  });
  registerBufferFamilies(registry, sources);
  const usageCounter = (name: string, help: string, field: 'requests' | 'messagesPushed' | 'messagesDelivered' | 'acks'): void => {
    new Counter({
      name,
      help: `${help} (metered, this process, up to the last flush), by tenant.`,
      labelNames: ['tenant'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const [tenant, n] of foldByLabel(sources.usage(), label, (c) => c[field])) this.inc({ tenant }, n);
      },
    });
  };
  usageCounter('queen_edge_usage_requests_total', 'Requests', 'requests');
  usageCounter('queen_edge_messages_pushed_total', 'Messages pushed (queued, duplicate or buffered)', 'messagesPushed');
  usageCounter('queen_edge_messages_delivered_total', 'Messages delivered by pops', 'messagesDelivered');
  usageCounter('queen_edge_acks_total', 'Successful acks', 'acks');
  new Counter({
    name: 'queen_edge_bytes_total',
    help: 'Request (ingress) and response (egress) body bytes (metered, this process), by tenant.',
    labelNames: ['tenant', 'direction'] as const,
    registers: [registry],
    collect() {
      this.reset();
      const usage = sources.usage();
      for (const [tenant, n] of foldByLabel(usage, label, (c) => c.ingressBytes)) this.inc({ tenant, direction: 'ingress' }, n);
      for (const [tenant, n] of foldByLabel(usage, label, (c) => c.egressBytes)) this.inc({ tenant, direction: 'egress' }, n);
    },
  });
}

/** Configuration reloads: when, whether the last one applied, how many of each result. */
function registerReloadFamilies(registry: Registry, sources: MetricSources): void {
  // Every worker applies the same reloads: a cluster's figure is the max (or min for success), not a sum.
  new Gauge({
    name: 'queen_edge_config_last_reload_timestamp_seconds',
    help: 'When the configuration was last reloaded (applied or refused); 0 when never since the start.',
    registers: [registry],
    aggregator: 'max',
    collect() {
      this.set((sources.reloads?.().lastAtMs ?? 0) / 1000);
    },
  });
  new Gauge({
    name: 'queen_edge_config_last_reload_success',
    help: 'Whether the last configuration reload was applied (1) or refused, the running configuration kept (0); 1 when none was tried.',
    registers: [registry],
    aggregator: 'min',
    collect() {
      this.set(sources.reloads?.().last?.result === 'refused' ? 0 : 1);
    },
  });
  new Counter({
    name: 'queen_edge_config_reloads_total',
    help: 'Configuration reloads by result: applied or refused.',
    labelNames: ['result'] as const,
    registers: [registry],
    aggregator: 'max',
    collect() {
      this.reset();
      const counts = sources.reloads?.().counts ?? { applied: 0, refused: 0 };
      this.inc({ result: 'applied' }, counts.applied);
      this.inc({ result: 'refused' }, counts.refused);
    },
  });
  new Gauge({
    name: 'queen_edge_config_restart_needed',
    help: 'Settings (by dotted path) whose value in the file differs from what runs: they apply only after a restart (1 each; none when all applied).',
    labelNames: ['setting'] as const,
    registers: [registry],
    aggregator: 'max',
    collect() {
      this.reset();
      for (const setting of sources.reloads?.().restartNeeded ?? []) this.set({ setting }, 1);
    },
  });
}

/** The listener's certificates and the JWKS fetches: what an operator renews or repairs before it breaks. */
function registerHealthFamilies(registry: Registry, sources: MetricSources): void {
  // Every worker serves the same files: a cluster's figure is the earliest expiry.
  new Gauge({
    name: 'queen_edge_certificate_expiry_timestamp_seconds',
    help: 'When each certificate the HTTPS listener serves or trusts expires (notAfter), by config path and the names it covers.',
    labelNames: ['certificate', 'names'] as const,
    registers: [registry],
    aggregator: 'min',
    collect() {
      this.reset();
      for (const c of sources.certificates?.() ?? []) this.set({ certificate: c.certificate, names: c.names }, c.notAfterMs / 1000);
    },
  });
  new Counter({
    name: 'queen_edge_jwks_fetch_failures_total',
    help: 'JWKS fetches that failed (unreachable, not 200, not a key set; the keys already loaded are kept), by JWKS URL.',
    labelNames: ['url'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [url, n] of sources.jwksFailures?.() ?? []) this.inc({ url }, n);
    },
  });
}
