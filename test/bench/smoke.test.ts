/**
 * A smoke run of the benchmark harness (never a speed check): the double direct, the floor
 * forwarder, the edge's plain forwarding over h1 and h2 (h2 when h2load is installed) and the
 * throttled-tenant 429 rows, about 1 s each, must produce answers of the expected status, no
 * errors, and a CPU figure for each proxy. CI runs only this; `npm run bench` runs the rest.
 */
import { describe, expect, it } from 'vitest';
import { parseArgs, runBench, SCENARIO_LABELS, workloads } from '../../bench/run.js';
import { renderMarkdown } from '../../bench/report.js';
import { H2LOAD_HINT, h2loadAvailable } from '../../bench/h2load.js';

describe('bench harness', () => {
  it('push bodies are exactly 64 bytes and 8 KiB, and pops expect the 200 batch', () => {
    const w = workloads();
    expect(w.map((x) => [x.name, x.body?.length ?? null, x.expectStatus])).toEqual([
      ['push-64B', 64, 201],
      ['push-8KiB', 8192, 201],
      ['pop', null, 200],
    ]);
    for (const x of w) if (x.body) expect(JSON.parse(x.body.toString()).items).toHaveLength(1);
  });

  it('refuses an unknown scenario name instead of running nothing', () => {
    expect(() => parseArgs(['--only', 'direct,edgee'], () => {})).toThrow(/unknown scenario "edgee"/);
  });

  it('a --quick run answers every request as expected and measures the proxies: direct, floor, edge, h2 and the throttled 429 rows', async () => {
    const lines: string[] = [];
    const opts = {
      ...parseArgs(
        ['--quick', '--only', 'direct,floor,edge,h2-edge,throttled', '--seconds', '2', '--warmup', '1', '--h2-streams', '10', '--tsx', '--no-write'],
        (l) => lines.push(l),
      ),
      connections: 10,
    };
    const report = await runBench(opts);
    const h2 = h2loadAvailable();
    if (!h2) expect(report.skipped['h2-edge']).toBe(H2LOAD_HINT);
    expect(report.runs.map((r) => [r.scenario, r.workload])).toEqual([
      ['direct', 'push-64B'],
      ['floor', 'push-64B'],
      ['edge', 'push-64B'],
      ...(h2 ? [['h2-edge', 'push-64B']] : []),
      ['throttled', '429 no body'],
      ['throttled', '429 1MiB body'],
    ]);
    for (const r of report.runs.filter((x) => x.scenario !== 'throttled')) {
      expect(r.requests).toBeGreaterThan(0);
      expect(r.errors + r.timeouts + r.unexpected).toBe(0);
      expect(r.statusCounts).toEqual({ 201: r.requests });
      expect(r.p50Ms).toBeGreaterThan(0);
      expect(r.p99Ms).toBeGreaterThanOrEqual(r.p50Ms);
      if (r.scenario !== 'direct') expect(r.cpuUsPerReq).toBeGreaterThan(0);
      // The probe runs in the floor and the edge, not in the double.
      if (r.scenario === 'direct') expect(r.allocBytesPerReq).toBeNull();
      else {
        expect(r.allocBytesPerReq).toBeGreaterThan(0);
        expect(r.gcMsPer10k).toBeGreaterThanOrEqual(0);
        expect(r.gc?.minor.count).toBeGreaterThanOrEqual(0);
      }
    }
    // The throttled tenant is admitted about once a second; everything else is its 429.
    for (const r of report.runs.filter((x) => x.scenario === 'throttled')) {
      expect(r.statusCounts['429']).toBeGreaterThan(0);
      expect(Object.keys(r.statusCounts).filter((k) => k !== '429' && k !== '200' && k !== '201')).toEqual([]);
      expect(r.cpuUsPerReq).toBeGreaterThan(0);
    }
    const md = renderMarkdown(report, SCENARIO_LABELS);
    expect(md).toContain(`| ${SCENARIO_LABELS.edge} |`);
    expect(md).toContain(`| ${SCENARIO_LABELS.floor} |`);
    expect(md).toContain('CPU × floor');
    expect(md).toContain('| alloc KiB/req | GC ms / 10k req | GC % of CPU |');
    expect(md).toMatch(/plain forwarding ≤ 1\.15× the floor's CPU per request: \d/);
    expect(md).toMatch(/a 429 for a throttled tenant with a 1 MiB body < 2× a 429 without a body \(HTTP\/1\.1/);
    expect(lines.some((l) => l.includes('edge') && l.includes('req/s'))).toBe(true);
  }, 180_000);
});
