/**
 * Live stats: the exposition-text parser, histogram quantiles, rates between two reads, and the
 * figures of two workers as a multi-worker primary aggregates them (prom-client's aggregator).
 */
import { AggregatorRegistry, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { createLiveStats, histogramQuantile, parsePromText } from '../../src/admin/stats.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { startEdge, testConfig, token, call } from '../helpers/edge.js';
import { startBrokerDouble } from '../helpers/broker-double.js';
import { ADMIN_TOKEN, admin } from './admin-call.js';

describe('parsePromText', () => {
  it('reads names, escaped label values, +Inf, and skips comments', () => {
    const text = '# HELP x y\n# TYPE x counter\nx{a="b\\"c",le="+Inf"} 3\nplain 1.5e3\n\nbad line\n';
    expect(parsePromText(text)).toEqual([
      { name: 'x', labels: { a: 'b"c', le: '+Inf' }, value: 3 },
      { name: 'plain', labels: {}, value: 1500 },
    ]);
  });
});

describe('histogramQuantile', () => {
  it('interpolates inside the bucket holding the rank; null when empty', () => {
    const b = new Map([
      [0.001, 50],
      [0.01, 90],
      [0.1, 100],
      [Infinity, 100],
    ]);
    expect(histogramQuantile(0.5, b)).toBeCloseTo(0.001);
    expect(histogramQuantile(0.7, b)).toBeCloseTo(0.001 + (0.009 * 20) / 40);
    expect(histogramQuantile(0.99, b)).toBeCloseTo(0.01 + (0.09 * 9) / 10);
    expect(histogramQuantile(0.5, new Map([[Infinity, 0]]))).toBeNull();
    expect(
      histogramQuantile(
        0.99,
        new Map([
          [0.5, 1],
          [Infinity, 2],
        ]),
      ),
    ).toBe(0.5);
  });
});

function worker(parkedTenant: string) {
  const m = createMetrics(
    { limiterMode: () => 'redis', brokers: () => [], usage: () => new Map(), flush: () => ({ flushes: 0, failures: 0, lagMs: 0 }) },
    new Registry(),
  );
  m.parked(parkedTenant, 1);
  return m;
}

describe('createLiveStats over two workers, as the primary aggregates them', () => {
  it('counts both workers, sums their requests and refusals, and rates them between reads', async () => {
    const w1 = worker('acme');
    const w2 = worker('beta');
    const aggregate = async () =>
      (await AggregatorRegistry.aggregate([await w1.registry.getMetricsAsJSON(), await w2.registry.getMetricsAsJSON()]).metrics()) as string;
    let now = 1_000_000;
    const stats = createLiveStats(aggregate, { redisConfigured: true, failMode: 'closed' }, () => now);

    const first = await stats();
    expect(first).toMatchObject({
      workers: 2,
      parkedPolls: 2,
      windowSeconds: null,
      requests: { total: 0, perSecond: null },
      redis: { configured: true, failMode: 'closed', limiterModes: { redis: 2 } },
    });

    for (let i = 0; i < 30; i++) w1.request('acme', 'push', 201, null, 2, 1, 'admitted');
    for (let i = 0; i < 10; i++) w2.request('beta', 'push', 429, 'rate_limited', 0.5, 0, 'rate_limited');
    now += 2000;
    const second = await stats();
    expect(second.windowSeconds).toBe(2);
    expect(second.requests).toEqual({ total: 40, perSecond: 20 });
    expect(second.refusals).toEqual({ total: { rate_limited: 10 }, perSecond: { rate_limited: 5 } });
    const tenants = second.tenants as Record<string, unknown>;
    expect(tenants.requestsPerSecond).toEqual({ acme: 15, beta: 5 });
    expect(tenants.parkedPolls).toEqual({ acme: 1, beta: 1 });
    // 30 observations of 1 ms added, 10 of 0.5 ms: the median and p99 fall in the 1 ms bucket.
    const latency = second.addedLatencyMs as { p50: number; p99: number };
    expect(latency.p50).toBeGreaterThan(0.5);
    expect(latency.p50).toBeLessThanOrEqual(1);
    expect(latency.p99).toBeLessThanOrEqual(1);
  });
});

describe('GET /admin/v1/stats and /admin/v1/plans', () => {
  it('answers live figures behind the admin token', async () => {
    const broker = await startBrokerDouble({ name: 'b1' });
    const edge = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } } }));
    try {
      expect((await admin(edge, 'GET', '/admin/v1/stats', { token: 'wrong' })).status).toBe(401);
      const jwt = await token({ roles: ['read-write'], tenant: 'acme' });
      expect((await call(edge, 'POST', '/api/v1/push', { token: jwt, body: { items: [{ queue: 'q', payload: 1 }] } })).status).toBe(201);
      const r = await admin(edge, 'GET', '/admin/v1/stats');
      expect(r.status).toBe(200);
      expect(r.json).toMatchObject({
        workers: 1,
        requests: { total: 1 },
        redis: { configured: false, failMode: 'local', limiterModes: { memory: 1 } },
        brokers: [{ url: broker.url, up: true, inflight: 0 }],
      });
      const plans = await admin(edge, 'GET', '/admin/v1/plans');
      expect(plans.json).toMatchObject({ writable: false, plans: [{ id: 'test', limits: { maxBatch: 1000 } }] });
    } finally {
      await edge.close();
      await broker.close();
    }
  });
});
