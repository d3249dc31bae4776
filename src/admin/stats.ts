/**
 * Live stats for `GET /admin/v1/stats` and the console's overview, derived from the Prometheus
 * exposition text the admin listener already serves. In a multi-worker process that text is the
 * primary's aggregate over every worker, so the stats cover every worker without a second
 * aggregation channel. Rates and latency quantiles come from the difference between two reads
 * (at least MIN_WINDOW_MS apart): counters and histogram buckets only ever grow.
 */

/** One sample line of the exposition text. */
export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

const LINE_RE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL_RE = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function number(text: string): number {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  return Number(text);
}

/** Parses the sample lines of Prometheus text format 0.0.4 (comments and blank lines skipped). */
export function parsePromText(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = LINE_RE.exec(line);
    if (!m) continue;
    const value = number(m[3]!);
    // A malformed value (or a NaN sample) adds nothing a sum or a rate could use.
    if (Number.isNaN(value)) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(LABEL_RE)) labels[l[1]!] = l[2]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    out.push({ name: m[1]!, labels, value });
  }
  return out;
}

/** The counters a window is computed from. */
interface Totals {
  readonly at: number;
  readonly requests: number;
  readonly refusals: ReadonlyMap<string, number>;
  readonly tenantRequests: ReadonlyMap<string, number>;
  readonly tenantMessages: ReadonlyMap<string, number>;
  /** Edge-added latency histogram over every route: upper bound (s) → cumulative count. */
  readonly overhead: ReadonlyMap<number, number>;
}

function add(m: Map<string, number>, key: string, n: number): void {
  m.set(key, (m.get(key) ?? 0) + n);
}

function totals(at: number, samples: readonly Sample[]): Totals {
  let requests = 0;
  const refusals = new Map<string, number>();
  const tenantRequests = new Map<string, number>();
  const tenantMessages = new Map<string, number>();
  const overhead = new Map<number, number>();
  for (const s of samples) {
    if (s.name === 'queen_edge_requests_total') {
      requests += s.value;
      if (s.labels.code) add(refusals, s.labels.code, s.value);
      if (s.labels.tenant && s.labels.tenant !== '-') add(tenantRequests, s.labels.tenant, s.value);
    } else if (s.name === 'queen_edge_messages_pushed_total') {
      // Pushed only: the message rate limit and the monthly quota count pushes.
      add(tenantMessages, s.labels.tenant ?? '', s.value);
    } else if (s.name === 'queen_edge_proxy_overhead_seconds_bucket') {
      const le = number(s.labels.le ?? '');
      overhead.set(le, (overhead.get(le) ?? 0) + s.value);
    }
  }
  return { at, requests, refusals, tenantRequests, tenantMessages, overhead };
}

/**
 * The q-quantile of a cumulative histogram (upper bound → count), interpolated linearly inside
 * its bucket as Prometheus' histogram_quantile does; null when it holds no observation.
 */
export function histogramQuantile(q: number, buckets: ReadonlyMap<number, number>): number | null {
  const sorted = [...buckets].sort((a, b) => a[0] - b[0]);
  const total = sorted.at(-1)?.[1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  let lowerBound = 0;
  let lowerCount = 0;
  for (const [le, count] of sorted) {
    if (count >= rank) {
      if (le === Infinity) return lowerBound;
      return lowerBound + ((le - lowerBound) * (rank - lowerCount)) / Math.max(1, count - lowerCount);
    }
    lowerBound = le;
    lowerCount = count;
  }
  return lowerBound;
}

function perSecond(now: ReadonlyMap<string, number>, before: ReadonlyMap<string, number>, seconds: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of now) out[k] = Math.max(0, v - (before.get(k) ?? 0)) / seconds;
  return out;
}

/** What the stats endpoint adds from the configuration. */
export interface StatsContext {
  readonly redisConfigured: boolean;
  readonly failMode: string;
}

/** Two reads closer than this reuse the last window (several consoles polling share it). */
const MIN_WINDOW_MS = 1000;

interface Window {
  readonly seconds: number;
  readonly requestsPerSecond: number;
  readonly refusalsPerSecond: Record<string, number>;
  readonly tenantRequestsPerSecond: Record<string, number>;
  readonly tenantMessagesPerSecond: Record<string, number>;
  readonly addedLatencyP50Ms: number | null;
  readonly addedLatencyP99Ms: number | null;
}

function windowBetween(a: Totals, b: Totals): Window {
  const seconds = (b.at - a.at) / 1000;
  const delta = new Map<number, number>();
  for (const [le, n] of b.overhead) delta.set(le, Math.max(0, n - (a.overhead.get(le) ?? 0)));
  const ms = (s: number | null) => (s === null ? null : Math.round(s * 1e6) / 1000);
  return {
    seconds,
    requestsPerSecond: Math.max(0, b.requests - a.requests) / seconds,
    refusalsPerSecond: perSecond(b.refusals, a.refusals, seconds),
    tenantRequestsPerSecond: perSecond(b.tenantRequests, a.tenantRequests, seconds),
    tenantMessagesPerSecond: perSecond(b.tenantMessages, a.tenantMessages, seconds),
    addedLatencyP50Ms: ms(histogramQuantile(0.5, delta)),
    addedLatencyP99Ms: ms(histogramQuantile(0.99, delta)),
  };
}

/** Reads the metrics text and shapes it for operators; keeps the previous read for rates. */
export function createLiveStats(metricsText: () => Promise<string>, ctx: StatsContext, clock: () => number): () => Promise<Record<string, unknown>> {
  let previous: Totals | null = null;
  let window: Window | null = null;
  return async () => {
    const samples = parsePromText(await metricsText());
    const now = totals(clock(), samples);
    if (previous === null) previous = now;
    else if (now.at - previous.at >= MIN_WINDOW_MS) {
      window = windowBetween(previous, now);
      previous = now;
    }
    let workers = 0;
    let parked = 0;
    let redisErrors = 0;
    let flushLagSeconds = 0;
    const limiterModes: Record<string, number> = {};
    const brokers = new Map<string, { url: string; up: boolean; inflight: number }>();
    const tenantParked: Record<string, number> = {};
    for (const s of samples) {
      switch (s.name) {
        case 'queen_edge_workers':
          workers += s.value;
          break;
        case 'queen_edge_parked_polls':
          parked += s.value;
          tenantParked[s.labels.tenant ?? ''] = (tenantParked[s.labels.tenant ?? ''] ?? 0) + s.value;
          break;
        case 'queen_edge_limiter_mode':
          if (s.value > 0) limiterModes[s.labels.mode ?? ''] = s.value;
          break;
        case 'queen_edge_redis_errors_total':
          redisErrors += s.value;
          break;
        case 'queen_edge_metering_flush_lag_seconds':
          flushLagSeconds = Math.max(flushLagSeconds, s.value);
          break;
        case 'queen_edge_broker_up':
        case 'queen_edge_broker_inflight': {
          const url = s.labels.broker ?? '';
          const b = brokers.get(url) ?? { url, up: true, inflight: 0 };
          if (s.name === 'queen_edge_broker_up') b.up = s.value >= 1;
          else b.inflight += s.value;
          brokers.set(url, b);
          break;
        }
      }
    }
    const refusalsTotal: Record<string, number> = Object.fromEntries(now.refusals);
    return {
      at: new Date(now.at).toISOString(),
      workers,
      windowSeconds: window?.seconds ?? null,
      requests: { total: now.requests, perSecond: window?.requestsPerSecond ?? null },
      refusals: { total: refusalsTotal, perSecond: window?.refusalsPerSecond ?? null },
      addedLatencyMs: { p50: window?.addedLatencyP50Ms ?? null, p99: window?.addedLatencyP99Ms ?? null },
      parkedPolls: parked,
      redis: { configured: ctx.redisConfigured, failMode: ctx.failMode, limiterModes, errorsTotal: redisErrors },
      metering: { flushLagSeconds },
      brokers: [...brokers.values()].sort((a, b) => a.url.localeCompare(b.url)),
      tenants: {
        requestsPerSecond: window?.tenantRequestsPerSecond ?? null,
        messagesPerSecond: window?.tenantMessagesPerSecond ?? null,
        parkedPolls: tenantParked,
      },
    };
  };
}
