/** `/metrics` on the admin listener: valid Prometheus text with the edge's families. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { admin } from '../admin/admin-call.js';

let broker: BrokerDouble;
let h: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  h = await startEdge(testConfig([broker.url]), { usageFlushMs: 50 });
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
});

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A strict reader of the text exposition format (0.0.4): throws on any line it cannot read. */
function parseExposition(text: string): { types: Map<string, string>; samples: Sample[] } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sampleRe = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (-?(?:[0-9.e+-]+|NaN|\\+Inf|-Inf))$`);
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/y;
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line);
    if (meta) {
      if (meta[1] === 'TYPE') {
        expect(['counter', 'gauge', 'histogram', 'summary', 'untyped']).toContain(meta[3]);
        types.set(meta[2]!, meta[3]!);
      }
      continue;
    }
    const m = sampleRe.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    if (m[2]) {
      labelRe.lastIndex = 0;
      while (labelRe.lastIndex < m[2].length) {
        const l = labelRe.exec(m[2]);
        if (!l) throw new Error(`bad labels: ${line}`);
        labels[l[1]!] = l[2]!;
      }
    }
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return { types, samples };
}

describe('/metrics', () => {
  it('parses as Prometheus text and has the request, latency, parked, limiter, broker, Redis and metering families', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    expect((await call(h, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: 1 }] } })).status).toBe(201);
    expect((await call(h, 'GET', '/api/v1/kv/x', { token: tok })).status).toBe(403);
    const parked = call(h, 'GET', '/api/v1/pop/queue/empty?wait=true&timeout=1000', { token: tok });
    await broker.waitForRequests(1, (r) => r.path === '/api/v1/pop/queue/empty', 2000);

    const res = await admin(h, 'GET', '/metrics', { token: null });
    expect(res.status).toBe(200);
    expect(String(res.headers['content-type'])).toContain('text/plain');
    const { types, samples } = parseExposition(res.text);
    const families = [
      'queen_edge_requests_total',
      'queen_edge_proxy_overhead_seconds',
      'queen_edge_upstream_duration_seconds',
      'queen_edge_parked_polls',
      'queen_edge_limiter_decisions_total',
      'queen_edge_limiter_mode',
      'queen_edge_broker_up',
      'queen_edge_broker_inflight',
      'queen_edge_redis_errors_total',
      'queen_edge_metering_flush_lag_seconds',
      'queen_edge_metering_flush_failures_total',
      'queen_edge_messages_pushed_total',
      'process_cpu_seconds_total',
    ];
    for (const f of families) expect(types.has(f), f).toBe(true);
    const value = (name: string, labels: Record<string, string>) =>
      samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;
    expect(value('queen_edge_requests_total', { tenant: 'acme', route: 'push', status: '2xx', code: '' })).toBe(1);
    expect(value('queen_edge_requests_total', { tenant: 'acme', route: 'kv.read', status: '4xx', code: 'feature_gated' })).toBe(1);
    expect(value('queen_edge_parked_polls', { tenant: 'acme' })).toBe(1);
    expect(value('queen_edge_limiter_decisions_total', { tenant: 'acme', decision: 'admitted' })).toBe(1);
    expect(value('queen_edge_limiter_mode', { mode: 'memory' })).toBe(1);
    expect(value('queen_edge_broker_up', { broker: broker.url })).toBe(1);
    expect(value('queen_edge_upstream_duration_seconds_count', { route: 'push' })).toBe(1);
    expect(value('queen_edge_proxy_overhead_seconds_count', { route: 'kv.read' })).toBe(1);
    // Metered counts are exposed up to the meter's last flush, which a busy machine may not have reached yet.
    const pushed = async () => {
      const again = parseExposition((await admin(h, 'GET', '/metrics', { token: null })).text).samples;
      return again.find((s) => s.name === 'queen_edge_messages_pushed_total' && s.labels.tenant === 'acme')?.value;
    };
    await expect.poll(pushed, { timeout: 10_000 }).toBe(1);
    // Bounded labels: no queue names, no paths.
    expect(res.text).not.toContain('empty');
    expect(res.text).not.toContain('/api/v1');
    await parked;
  });
});

describe('latency histograms', () => {
  it('expose what a prom-client Histogram with the same buckets exposes for the same observations, and sum across workers', async () => {
    const { Histogram, Registry, AggregatorRegistry } = await import('prom-client');
    const { createMetrics } = await import('../../src/observability/metrics.js');
    const sources = { limiterMode: () => 'memory', brokers: () => [], usage: () => new Map(), flush: () => ({ flushes: 0, failures: 0, lagMs: 0 }) };
    const ours = createMetrics(sources);
    const reference = new Registry();
    const buckets = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
    const h = new Histogram({ name: 'queen_edge_upstream_duration_seconds', help: 'x', labelNames: ['route'], buckets, registers: [reference] });
    const observations: Array<[string, number]> = [
      ['push', 0.0001],
      ['push', 0.00007],
      ['pop', 70],
      ['push', 0.3],
      ['pop', 0.00005],
      ['pop', 2.5],
    ];
    for (const [route, ms] of observations) ours.request('t', route, 200, null, ms * 1000 + 1, ms * 1000, null);
    for (const [route, s] of observations) h.labels(route).observe(s);
    const lines = (text: string) =>
      text
        .split('\n')
        .filter((l) => l.startsWith('queen_edge_upstream_duration_seconds'))
        .sort();
    const mine = lines(await ours.text());
    expect(mine.length).toBe(2 * (buckets.length + 3));
    // Floating-point sums of ms→s conversions may differ in the last digit.
    const rounded = (ls: string[]) => ls.map((l) => l.replace(/ (\S+)$/, (_m, v: string) => ` ${Number(Number(v).toPrecision(9))}`));
    expect(rounded(mine)).toEqual(rounded(lines(await reference.metrics())));
    // Workers: the primary sums the same family from every worker.
    const merged = AggregatorRegistry.aggregate([await ours.registry.getMetricsAsJSON(), await ours.registry.getMetricsAsJSON()]);
    const count = (await merged.getMetricsAsJSON())
      .find((m) => m.name === 'queen_edge_upstream_duration_seconds')!
      .values.find((v) => (v as { metricName?: string }).metricName === 'queen_edge_upstream_duration_seconds_count' && v.labels.route === 'pop');
    expect(count?.value).toBe(6);
  });
});
