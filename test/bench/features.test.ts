/**
 * The per-feature table's arithmetic and round orders (bench/features.ts), without starting any
 * process: `npm run bench:features` does the measuring.
 */
import { describe, expect, it } from 'vitest';
import { type FeatureSample, type FeaturesReport, featureRows, renderFeatures, roundOrder } from '../../bench/features.js';

const sample = (variant: string, round: number, cpuUsPerReq: number, allocBytesPerReq: number | null = 2048, pair = round): FeatureSample => ({
  round,
  pair,
  variant,
  workload: 'push-64B',
  requests: 1000,
  reqPerSec: 500,
  cpuUsPerReq,
  allocBytesPerReq,
  gcMsPer10k: 1,
  gcShareOfCpu: 0.01,
  bad: 0,
  load1: 0,
});

describe('per-feature cost', () => {
  it('orders the variants differently each round, every variant once', () => {
    const ids = ['full', 'a', 'b', 'c', 'd'];
    const orders = [0, 1, 2, 3].map((r) => roundOrder(ids, r));
    for (const o of orders) expect([...o].sort()).toEqual([...ids].sort());
    expect(new Set(orders.map((o) => o.join())).size).toBe(orders.length);
    expect(new Set(orders.map((o) => o[0])).size).toBe(orders.length);
  });

  it('a cost is the median of differences taken at the same moment; switched off it is full − variant, switched on variant − full', () => {
    // Pairs 1–3: the full pipeline beside no-x; 4–6: beside with-y. The host's speed moves between
    // pairs (100, 140, 90): the difference of medians would be 30 and 20, the pairs' own are 20 and 25.
    const samples = [
      ...[100, 140, 90].map((us, i) => sample('full', i + 1, us, 2048, i + 1)),
      ...[80, 100, 75].map((us, i) => sample('no-x', i + 1, us, 1024, i + 1)),
      ...[100, 140, 90].map((us, i) => sample('full', i + 1, us, 2048, i + 4)),
      ...[125, 170, 110].map((us, i) => sample('with-y', i + 1, us, 2048, i + 4)),
    ];
    const rows = featureRows(samples, [
      { id: 'full', feature: 'full', relation: 'off' },
      { id: 'no-x', feature: 'x', relation: 'off' },
      { id: 'with-y', feature: 'y', relation: 'on' },
    ]);
    expect(rows.map((r) => [r.variant, r.withUs, r.withoutUs, r.costUs, r.shareOfFull])).toEqual([
      ['no-x', 100, 80, 20, 0.2],
      ['with-y', 125, 100, 25, 0.25],
    ]);
    expect(rows[0]!.withoutAllocBytes).toBe(1024);
    // A sample without its pair's other half counts for nothing.
    expect(featureRows([...samples, sample('no-x', 4, 10, 1024, 99)], [{ id: 'no-x', feature: 'x', relation: 'off' }])[0]!.costUs).toBe(20);
    const report: FeaturesReport = {
      date: '2026-01-01T00:00:00.000Z',
      machine: { cpus: 2, node: 'v20', load1AtStart: 0, load1AtEnd: 0 },
      options: { rounds: 3, seconds: 6, warmupSeconds: 2, connections: 50, edgeFrom: 'tsc build', keys: 10 },
      notes: [],
      orders: [],
      samples,
      rows,
    };
    const md = renderFeatures(report);
    expect(md).toContain('| x | 100.0 (90.0–140.0) | 80.0 (75.0–100.0) | 20.0 | 20.0 % | 2.0 / 1.0 |');
    expect(md).toContain('Full pipeline: 100.0 µs/req');
  });
});
