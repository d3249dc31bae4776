/**
 * A smoke run of the benchmark harness (never a speed check): the double direct and the edge's
 * plain forwarding for about 2 s each must produce answers, all of the expected status, no errors,
 * and a CPU figure for the proxy process. CI runs only this; `npm run bench` runs the rest.
 */
import { describe, expect, it } from 'vitest';
import { parseArgs, runBench, SCENARIO_LABELS, workloads } from '../../bench/run.js';
import { renderMarkdown } from '../../bench/report.js';

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

  it('a --quick run of direct and edge answers every request with 201 and measures the proxy CPU', async () => {
    const lines: string[] = [];
    const opts = { ...parseArgs(['--quick', '--only', 'direct,edge', '--seconds', '2', '--warmup', '0.3', '--tsx', '--no-write'], (l) => lines.push(l)), connections: 10 };
    const report = await runBench(opts);
    expect(report.runs.map((r) => [r.scenario, r.workload])).toEqual([
      ['direct', 'push-64B'],
      ['edge', 'push-64B'],
    ]);
    for (const r of report.runs) {
      expect(r.requests).toBeGreaterThan(0);
      expect(r.errors + r.timeouts + r.unexpected).toBe(0);
      expect(r.statusCounts).toEqual({ 201: r.requests });
      expect(r.p50Ms).toBeGreaterThan(0);
      expect(r.p99Ms).toBeGreaterThanOrEqual(r.p50Ms);
    }
    const edge = report.runs[1]!;
    expect(edge.proxyCpuSeconds).toBeGreaterThan(0);
    expect(edge.cpuUsPerReq).toBeGreaterThan(0);
    const md = renderMarkdown(report, SCENARIO_LABELS);
    expect(md).toContain(`| ${SCENARIO_LABELS.edge} |`);
    expect(lines.some((l) => l.includes('edge') && l.includes('req/s'))).toBe(true);
  }, 60_000);
});
