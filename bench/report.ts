/**
 * The Markdown form of a benchmark report: the tables and the target checks, written between two
 * markers in BENCHMARKS.md so the hand-written analysis around them survives a new run.
 */
import { readFile, writeFile } from 'node:fs/promises';
import type { BenchReport, RunRecord, ScenarioId } from './run.js';

const f = (v: number | null | undefined, digits = 1): string => (v === null || v === undefined || !Number.isFinite(v) ? '-' : v.toFixed(digits));
const ratio = (a: number | null | undefined, b: number | null | undefined): string => (a && b ? `${(a / b).toFixed(2)}×` : '-');

function find(runs: readonly RunRecord[], scenario: ScenarioId, workload: string): RunRecord | undefined {
  return runs.find((r) => r.scenario === scenario && r.workload === workload);
}

/** The generated block: run conditions, one table per workload, long polls, target checks. */
export function renderMarkdown(report: BenchReport, labels: Record<ScenarioId, string>): string {
  const out: string[] = [];
  const m = report.machine;
  out.push(
    `Run ${report.date} · ${m.cpus} CPUs · Node ${m.node} · 1-min load ${m.load1AtStart} at start, ${m.load1AtEnd} at end · ${report.options.connections} connections${report.options.h2Streams ? ` (h2 rows: h2load, ${report.options.h2Connections} connections × ${report.options.h2Streams} streams)` : ''}, ${report.options.warmupSeconds} s warm-up + ${report.options.seconds} s per row${(report.options.repeat ?? 1) > 1 ? ` · every row run ${report.options.repeat} times, interleaved (all scenarios in turn, then again): the row shown is the run with the median CPU per request, its CPU cell gives the range of all runs` : ''} · edge from ${report.options.edgeFrom}${report.options.quick ? ' · **--quick**' : ''}`,
  );
  out.push('');
  for (const n of report.notes) out.push(`- ${n}`);
  for (const [s, why] of Object.entries(report.skipped)) out.push(`- skipped ${labels[s as ScenarioId]}: ${why}`);
  out.push('');
  const workloads = [...new Set(report.runs.map((r) => r.workload))];
  for (const w of workloads) {
    const direct = find(report.runs, 'direct', w);
    const nginx = find(report.runs, 'nginx', w);
    out.push(`#### ${w}`, '');
    out.push(
      '| scenario | req/s | × direct | × nginx | p50 ms | p99 ms | p99.9 ms | p50 added | p99 added | proxy CPU µs/req | CPU × floor | CPU × nginx | CPU s / 10k req | alloc KiB/req | GC ms / 10k req | GC % of CPU | Redis round trips / commands per req | bad answers |',
    );
    out.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of report.runs.filter((x) => x.workload === w)) {
      const added = (a: number, b: number | undefined) => (b === undefined || r.scenario === 'direct' ? '-' : `${(a - b).toFixed(2)}`);
      const floor = floorFor(report.runs, r);
      out.push(
        `| ${labels[r.scenario]} | ${f(r.reqPerSec, 0)} | ${ratio(r.reqPerSec, direct?.reqPerSec)} | ${ratio(r.reqPerSec, nginx?.reqPerSec)} | ${f(r.p50Ms, 2)} | ${f(r.p99Ms, 2)} | ${f(r.p999Ms, 2)} | ${added(r.p50Ms, direct?.p50Ms)} | ${added(r.p99Ms, direct?.p99Ms)} | ${f(r.cpuUsPerReq)}${spread(r)} | ${ratio(r.cpuUsPerReq, floor?.cpuUsPerReq)} | ${ratio(r.cpuUsPerReq, nginx?.cpuUsPerReq)} | ${f(r.cpuSecondsPer10k, 3)} | ${f(r.allocBytesPerReq == null ? null : r.allocBytesPerReq / 1024)} | ${f(r.gcMsPer10k)} | ${f(r.gcShareOfCpu == null ? null : r.gcShareOfCpu * 100)} | ${r.redisEvalshaPerReq === null ? '-' : `${f(r.redisEvalshaPerReq, 2)} / ${f(r.redisCommandsPerReq, 2)}`} | ${r.errors + r.timeouts + r.unexpected} |`,
      );
    }
    out.push('');
  }
  if (report.longPolls.length > 0) {
    out.push('#### 6. parked long polls', '');
    out.push(
      '| clients | polls | parked at peak | s to park | RSS before MiB | RSS peak MiB | KiB / poll | of which V8 heap KiB | loop delay p50 / p99 / max ms | probe push p50 / p99 ms | proxy CPU s during hold | Redis cmd / poll | answered 204 | connection failures |',
    );
    out.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const l of report.longPolls) {
      out.push(
        `| ${l.proto === 'h2' ? 'h2, 250 per connection' : 'h1, one connection each'} | ${l.polls} | ${l.parkedAtPeak} | ${f(l.secondsToPark)} | ${f(l.rssBeforeMiB, 0)} | ${f(l.rssPeakMiB, 0)} | ${f(l.rssPerPollKiB)} | ${f(l.heapPerPollKiB)} | ${f(l.loopDelayP50Ms)} / ${f(l.loopDelayP99Ms)} / ${f(l.loopDelayMaxMs)} | ${f(l.probeP50Ms, 2)} / ${f(l.probeP99Ms, 2)} | ${f(l.cpuSecondsDuringHold, 2)} | ${f(l.redisCommandsPerPoll, 2)} | ${l.answered204} | ${l.connectionFailures} |`,
      );
    }
    out.push('');
  }
  out.push('#### Targets (this run)', '');
  out.push(...targets(report));
  if (report.profile) {
    out.push('', `#### Profile of the full pipeline (push-64B; ${report.profile.busyMs} ms busy, ${report.profile.idleMs} ms idle)`, '');
    out.push('| area (inclusive) | share of busy time |', '|---|---:|');
    for (const l of report.profile.inclusiveByArea.slice(0, 20)) out.push(`| ${l.name} | ${l.pct.toFixed(1)} % |`);
    out.push('', '| function (self) | share |', '|---|---:|');
    for (const l of report.profile.selfByFunction.slice(0, 20)) out.push(`| \`${l.name}\` | ${l.pct.toFixed(1)} % |`);
  }
  return out.join('\n');
}

/** ` (min–max)` of a row's repetitions, or nothing for a single run. */
function spread(r: RunRecord): string {
  const runs = r.cpuUsPerReqRuns ?? [];
  return runs.length > 1 ? ` (${f(Math.min(...runs))}–${f(Math.max(...runs))})` : '';
}

/** The floor a row is compared with: the h2 floor for h2 rows (when it ran), else the HTTP/1.1 floor. */
function floorFor(runs: readonly RunRecord[], r: RunRecord): RunRecord | undefined {
  if (r.scenario.startsWith('h2-')) return find(runs, 'h2-floor', r.workload) ?? find(runs, 'floor', r.workload);
  return find(runs, 'floor', r.workload);
}

function targets(report: BenchReport): string[] {
  const lines: string[] = [];
  const check = (ok: boolean | null, text: string) => lines.push(`- ${ok === null ? '(not measured)' : ok ? '**met**' : '**not met**'}: ${text}`);
  const workloads = [...new Set(report.runs.map((r) => r.workload))];
  for (const w of workloads) {
    const nginx = find(report.runs, 'nginx', w);
    const plain = find(report.runs, 'edge', w);
    const full = find(report.runs, 'full', w);
    if (plain && nginx)
      check(
        plain.reqPerSec >= 0.6 * nginx.reqPerSec,
        `${w}: plain forwarding ≥ 0.6× nginx req/s: ${ratio(plain.reqPerSec, nginx.reqPerSec)} (CPU per request ${ratio(plain.cpuUsPerReq, nginx.cpuUsPerReq)} nginx's)`,
      );
    if (full && plain)
      check(
        full.reqPerSec >= 0.75 * plain.reqPerSec,
        `${w}: full pipeline ≥ 0.75× plain forwarding req/s: ${ratio(full.reqPerSec, plain.reqPerSec)} (CPU per request ${ratio(full.cpuUsPerReq, plain.cpuUsPerReq)})`,
      );
    if (plain?.cpuUsPerReq != null)
      check(plain.cpuUsPerReq <= 30, `${w}: plain forwarding ≤ 30 µs CPU per request (BENCHMARKS.md targets): ${f(plain.cpuUsPerReq)} µs`);
    if (full?.cpuUsPerReq != null)
      check(full.cpuUsPerReq <= 40, `${w}: full pipeline ≤ 40 µs CPU per request (BENCHMARKS.md targets): ${f(full.cpuUsPerReq)} µs`);
    const floor = find(report.runs, 'floor', w);
    if (plain?.cpuUsPerReq != null && floor?.cpuUsPerReq)
      check(
        plain.cpuUsPerReq <= 1.15 * floor.cpuUsPerReq,
        `${w}: plain forwarding ≤ 1.15× the floor's CPU per request: ${ratio(plain.cpuUsPerReq, floor.cpuUsPerReq)}`,
      );
    if (full?.cpuUsPerReq != null && floor?.cpuUsPerReq)
      check(
        full.cpuUsPerReq <= 1.35 * floor.cpuUsPerReq,
        `${w}: full pipeline (exact limits, access log on) ≤ 1.35× the floor's CPU per request: ${ratio(full.cpuUsPerReq, floor.cpuUsPerReq)}`,
      );
    for (const [h2, h1] of [
      ['h2-edge', plain],
      ['h2-full', full],
    ] as const) {
      const r = find(report.runs, h2, w);
      if (r?.cpuUsPerReq != null && h1?.cpuUsPerReq)
        check(
          r.cpuUsPerReq <= h1.cpuUsPerReq,
          `${w}: ${h2} CPU per request (${report.options.connections} h1 connections vs h2 streams) ≤ the h1 figure: ${f(r.cpuUsPerReq)} vs ${f(h1.cpuUsPerReq)} µs (${ratio(r.cpuUsPerReq, h1.cpuUsPerReq)})`,
        );
    }
    const leased = find(report.runs, 'leased', w);
    if (leased?.cpuUsPerReq != null && floor?.cpuUsPerReq)
      check(
        leased.cpuUsPerReq <= 1.25 * floor.cpuUsPerReq,
        `${w}: full pipeline in leased mode ≤ 1.25× the floor's CPU per request: ${ratio(leased.cpuUsPerReq, floor.cpuUsPerReq)}`,
      );
    // Leased mode leases the request-rate bucket only: pushes (message rate, monthly quotas) stay exact.
    if (leased?.redisEvalshaPerReq != null)
      check(leased.redisEvalshaPerReq <= 0.1, `${w}: leased mode ≤ 0.1 Redis round trips per request: ${f(leased.redisEvalshaPerReq, 3)} EVALSHA per request`);
    if (full?.redisEvalshaPerReq != null)
      check(
        full.redisEvalshaPerReq <= 1.01,
        `${w}: ≤ 1 Redis round trip per request: ${f(full.redisEvalshaPerReq, 3)} EVALSHA per request (the only per-request command; ${f(full.redisCommandsPerReq, 2)} commands counting the ones the script runs inside Redis and the heartbeat)`,
      );
  }
  for (const [s, proto] of [
    ['throttled', 'HTTP/1.1: the connection is closed, so each refusal pays a new TLS handshake'],
    ['h2-throttled', 'h2: only the stream ends'],
  ] as const) {
    const noBody = find(report.runs, s, '429 no body');
    const mib = find(report.runs, s, '429 1MiB body');
    if (noBody?.cpuUsPerReq && mib?.cpuUsPerReq)
      check(
        mib.cpuUsPerReq < 2 * noBody.cpuUsPerReq,
        `a 429 for a throttled tenant with a 1 MiB body < 2× a 429 without a body (${proto}): ${f(mib.cpuUsPerReq)} vs ${f(noBody.cpuUsPerReq)} µs (${ratio(mib.cpuUsPerReq, noBody.cpuUsPerReq)})`,
      );
  }
  for (const proto of ['h1', 'h2'] as const) {
    const runs = report.longPolls.filter((l) => (l.proto ?? 'h1') === proto);
    const big = runs.reduce<BenchReport['longPolls'][number] | undefined>((a, l) => (a && a.polls >= l.polls ? a : l), undefined);
    if (!big) continue;
    // Fewer than 10,000 when the descriptor limit forbade it: projected from the measured cost per poll.
    const at10k = big.polls === 10_000 ? big.rssPeakMiB : big.rssBeforeMiB + (10_000 * big.rssPerPollKiB) / 1024;
    const how = big.polls === 10_000 ? 'measured' : `projected from ${big.polls} parked (${f(big.rssPeakMiB, 0)} MiB)`;
    check(
      at10k <= 350 && big.parkedAtPeak === big.polls,
      `10,000 parked polls (${proto}) ≤ 350 MiB RSS: ${f(at10k, 0)} MiB, ${how}; ${big.parkedAtPeak} of ${big.polls} parked at the peak`,
    );
  }
  return lines;
}

/** The markers of a generated block: `bench:generated` (npm run bench) unless another name is given. */
export function markers(name = 'generated'): { start: string; end: string } {
  return { start: `<!-- bench:${name}:start -->`, end: `<!-- bench:${name}:end -->` };
}

/** Replaces the generated block `name` in `file` (creating the file, or appending the block, when needed). */
export async function updateBenchmarksMd(file: string, block: string, name = 'generated'): Promise<void> {
  const { start: START, end: END } = markers(name);
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch {
    text = '# Benchmarks\n\nRun `npm run bench`; the block below is rewritten by each run.\n\n';
  }
  const fresh = `${START}\n${block}\n${END}`;
  const a = text.indexOf(START);
  const b = text.indexOf(END);
  text = a !== -1 && b > a ? text.slice(0, a) + fresh + text.slice(b + END.length) : `${text.trimEnd()}\n\n${fresh}\n`;
  await writeFile(file, text);
}
