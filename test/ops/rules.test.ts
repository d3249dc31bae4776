/**
 * The ops kit: the Prometheus rules pass `promtool check rules` and their unit tests
 * (`promtool test rules`), every metric the rules and the Grafana dashboard read is one queen-edge
 * exposes, and docs/troubleshooting.md has a section for every error code and every alert.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { parse, stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { ERROR_CATALOGUE, OPERATOR_ERRORS } from '../../src/errors.js';
import { createMetrics } from '../../src/observability/metrics.js';

const ROOT = resolve(import.meta.dirname, '../..');
const RULES = join(ROOT, 'ops/prometheus/queen-edge-rules.yaml');
const run = promisify(execFile);
const read = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

interface Rule {
  record?: string;
  alert?: string;
  expr: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const rules = (parse(readFileSync(RULES, 'utf8')) as { groups: { name: string; rules: Rule[] }[] }).groups.flatMap((g) => g.rules);
const alerts = rules.filter((r) => r.alert !== undefined);

interface Panel {
  type: string;
  title: string;
  targets?: { expr: string }[];
  description?: string;
}
const dashboard = JSON.parse(read('ops/grafana/queen-edge.json')) as {
  uid: string;
  panels: (Panel & { id: number })[];
  templating: { list: { query: unknown }[] };
};

/** Every series name the edge's /metrics can carry: the registered families plus a histogram's suffixes. */
async function exposedNames(): Promise<Set<string>> {
  const m = createMetrics({ limiterMode: () => 'redis', brokers: () => [], usage: () => new Map(), flush: () => ({ flushes: 0, failures: 0, lagMs: 0 }) });
  const names = new Set<string>();
  for (const f of await m.registry.getMetricsAsJSON()) {
    names.add(f.name);
    if (f.type === ('histogram' as unknown)) for (const s of ['_bucket', '_sum', '_count']) names.add(f.name + s);
  }
  return names;
}

/** Metric names in PromQL: queen-edge's and Node's process families; recorded names (with `:`) are not metrics. */
function metricNames(promql: string): string[] {
  return [...promql.matchAll(/(?<![\w:])((?:queen_edge|process|nodejs)_[a-z0-9_]+)(?![\w:])/g)].map((m) => m[1]!);
}

/** GitHub's anchor for a Markdown heading. */
function anchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9 _-]/g, '')
    .replace(/ /g, '-');
}
const troubleshooting = read('docs/troubleshooting.md');
const anchors = new Set([...troubleshooting.matchAll(/^#{2,4} (.+)$/gm)].map((m) => anchor(m[1]!)));

// promtool starts in well under a second; on a loaded machine a few.
describe('ops kit', { timeout: 20_000 }, () => {
  it('promtool accepts the rules and their unit tests pass (the limiter alert fires with several workers)', async () => {
    const check = await run('promtool', ['check', 'rules', RULES]);
    expect(check.stdout).toContain('SUCCESS');
    const unit = await run('promtool', ['test', 'rules', 'queen-edge-rules.test.yaml'], { cwd: join(ROOT, 'ops/prometheus') });
    expect(unit.stdout).toContain('SUCCESS');
  });

  it('every metric the rules and the dashboard read is one queen-edge exposes', async () => {
    const names = await exposedNames();
    const used = new Set([
      ...rules.flatMap((r) => metricNames(r.expr)),
      ...dashboard.panels.flatMap((p) => (p.targets ?? []).flatMap((t) => metricNames(t.expr))),
      ...dashboard.templating.list.flatMap((v) => metricNames(JSON.stringify(v.query))),
    ]);
    expect(used.size).toBeGreaterThan(15);
    for (const n of used) expect(names.has(n), n).toBe(true);
  });

  it('the limiter alert compares with > 0: the primary sums the mode gauge over workers', () => {
    const limiter = alerts.find((a) => a.alert === 'QueenEdgeLimiterDegraded')!;
    expect(limiter.expr).toMatch(/> 0$/);
    expect(limiter.expr).not.toMatch(/== 1/);
  });

  it('every alert has a severity, a summary and a runbook section in docs/troubleshooting.md', () => {
    expect(alerts.length).toBeGreaterThan(5);
    for (const a of alerts) {
      expect(['critical', 'warning', 'info'], a.alert).toContain(a.labels?.severity);
      expect(a.annotations?.summary, a.alert).toBeTruthy();
      const [file, section] = a.annotations!.runbook!.split('#');
      expect(file, a.alert).toBe('docs/troubleshooting.md');
      expect(anchors.has(section!), `${a.alert}: #${section}`).toBe(true);
    }
  });

  it('docs/troubleshooting.md has a section for every error code', () => {
    for (const code of [...Object.keys(ERROR_CATALOGUE), ...Object.keys(OPERATOR_ERRORS)]) expect(anchors.has(code), code).toBe(true);
  });

  it('every dashboard query is PromQL that promtool parses (its variables filled in)', async () => {
    const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
    const filled = exprs.map((e) => e.replaceAll('$__rate_interval', '5m').replace(/\$(instance|tenant)\b/g, '.*'));
    expect(filled.join('\n')).not.toContain('$');
    const dir = mkdtempSync(join(tmpdir(), 'qe-dashboard-'));
    try {
      const file = join(dir, 'dashboard-queries.yaml');
      writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules: filled.map((expr, i) => ({ record: `dashboard:query_${i}`, expr })) }] }));
      const check = await run('promtool', ['check', 'rules', file]);
      expect(check.stdout).toContain(`SUCCESS: ${filled.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the dashboard has unique panel ids and every query goes through the data source variable', () => {
    const ids = dashboard.panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect(dashboard.uid).toBe('queen-edge');
    for (const p of dashboard.panels.filter((q) => q.type !== 'row')) {
      expect(p.targets?.length, p.title).toBeGreaterThan(0);
      // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's dashboard variable, written literally
      expect(JSON.stringify(p), p.title).toContain('"uid":"${datasource}"');
    }
  });
});
