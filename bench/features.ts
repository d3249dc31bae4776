/**
 * `npm run bench:features`: what each feature of the full pipeline costs in CPU per request. The
 * full pipeline (bench/run.ts row 4) runs once as it is and once per feature with exactly that one
 * feature switched off (or, for tracing and API keys, switched on or swapped in), each variant its
 * own edge process, all started first. Each variant is then loaded at the same moment as the full
 * pipeline, by identical clients, in rounds (a different variant order each round, and which of the
 * two loads starts first alternating): a feature's cost is the median over the rounds of the two
 * processes' difference at that moment. This machine's speed drifts by up to 2× within minutes;
 * loads taken one after another carried that drift into every difference (a feature once "cost"
 * −36 µs). See BENCHMARKS.md, "Per-feature cost".
 *
 * Options: --rounds N (default 3), --seconds N (default 6), --warmup N (default 2), --connections N
 * (default 50), --workloads push-64B,pop, --only <variant ids> (the full pipeline always runs),
 * --keys N (API keys in the directory, default 100,000), --tsx, --no-write, --render <file.json>,
 * --alloc-check (instead of the variants: what the probe's GC window and the heap sampler cost on
 * the full pipeline, and whether their byte counts agree; printed, nothing written).
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connectTest, PrivateRedis } from '../test/helpers/redis.js';
import { edgeConfig, type EdgeConfigInput, type EdgeProcess, prepareEdgeEntry, REPO_ROOT, startEdgeProcess, BENCH_TENANT } from './edge.js';
import { runLoad, type Workload } from './load.js';
import { startOtlpSink } from './otlp-sink.js';
import { freePort, loadAverage, makeCertificate, stopChild, treeCpuSeconds } from './procs.js';
import { updateBenchmarksMd } from './report.js';
import { BENCH_KEYS, gcColumns, meteringExtra, type RunRecord, seedApiKeys, startDouble, token, workloads } from './run.js';

/** What a variant does to the full pipeline. */
interface Variant {
  readonly id: string;
  /** The feature, as the table names it. */
  readonly feature: string;
  /** `off`: the variant lacks the feature (its cost = full − variant); `on`: it adds or swaps it in (cost = variant − full). */
  readonly relation: 'off' | 'on';
  /** Changes to the full pipeline's input to bench/edge.ts edgeConfig. */
  readonly input?: Partial<EdgeConfigInput>;
  /** Sections merged into the generated config (objects merged key by key, at every depth). */
  readonly merge?: (port: number) => Record<string, unknown>;
  /** Authenticate with the tenant API key instead of the JWT. */
  readonly apiKey?: boolean;
}

const FULL = 'full';

/**
 * The variants. Features without a config switch are listed in the report's notes instead:
 * metrics (src/config/schema.ts has `metrics.tenantLabels` only, which changes labels, not whether
 * metrics are kept) and metering when the schema has no metering section (bench/run.ts meteringExtra).
 */
function variants(traceUrl: string, metering: ReturnType<typeof meteringExtra>): Variant[] {
  return [
    { id: FULL, feature: 'full pipeline (bench/run.ts row 4)', relation: 'off' },
    {
      id: 'no-tls',
      feature: 'TLS (off: the plain `server.http` listener, loaded over http://)',
      relation: 'off',
      merge: (port) => ({ server: { https: { port: null }, http: { host: '127.0.0.1', port } } }),
    },
    // The level stays `info`: only the access log goes (edgeConfig would also lower the level).
    { id: 'no-access-log', feature: 'access log (`log.accessLog`)', relation: 'off', merge: () => ({ log: { accessLog: false } }) },
    { id: 'no-redis', feature: 'Redis limits (off: `redis.url: null`, the in-memory limiter)', relation: 'off', input: { redisUrl: null } },
    ...(metering.on ? [{ id: 'no-metering', feature: 'metering (the section bench/run.ts configures)', relation: 'off' as const, input: { extra: {} } }] : []),
    {
      id: 'api-key',
      feature: `auth by a tenant API key (among ${BENCH_KEYS.toLocaleString('en-US')}) instead of a cached HS256 JWT`,
      relation: 'on',
      apiKey: true,
    },
    {
      id: 'trace-1',
      feature: 'tracing on, 1 % sampled (OTLP to a sink in the bench process)',
      relation: 'on',
      input: { extra: { ...metering.extra, tracing: { enabled: true, endpoint: traceUrl, ratio: 0.01 } } },
    },
  ];
}

/**
 * The variants' order in round `r` (0-based): rotated by r in even rounds; in odd rounds rotated
 * by r + 1 and reversed. Each round starts with another variant and the direction alternates, so
 * no variant always follows the same one.
 */
export function roundOrder<T>(items: readonly T[], r: number): T[] {
  const n = items.length;
  const rotated = items.map((_, i) => items[(i + r + (r % 2)) % n]!);
  return r % 2 === 1 ? rotated.reverse() : rotated;
}

/** One measured load of one variant. */
export interface FeatureSample {
  round: number;
  /** The loads taken at the same moment share it: a variant's and the full pipeline's. */
  pair: number;
  variant: string;
  workload: string;
  requests: number;
  reqPerSec: number;
  cpuUsPerReq: number;
  allocBytesPerReq: number | null;
  gcMsPer10k: number | null;
  gcShareOfCpu: number | null;
  /** Errors, timeouts and answers of another status. */
  bad: number;
  load1: number;
}

/** One table row: a feature's medians with and without it. */
export interface FeatureRow {
  workload: string;
  variant: string;
  feature: string;
  withUs: number;
  withoutUs: number;
  /** withUs − withoutUs: what the feature costs per request. */
  costUs: number;
  /** costUs over the full pipeline's median. */
  shareOfFull: number;
  withAllocBytes: number | null;
  withoutAllocBytes: number | null;
  /** Every round's CPU µs per request, with the feature and without (the same index: the same moment). */
  withRuns: number[];
  withoutRuns: number[];
}

export interface FeaturesReport {
  date: string;
  machine: { cpus: number; node: string; load1AtStart: number; load1AtEnd: number };
  options: { rounds: number; seconds: number; warmupSeconds: number; connections: number; edgeFrom: 'tsc build' | 'tsx (source)'; keys: number };
  notes: string[];
  /** The variant order of each round. */
  orders: string[][];
  samples: FeatureSample[];
  rows: FeatureRow[];
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Objects merged key by key at every depth; anything else replaced. */
function deepMerge(base: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(patch)) {
    const b = out[k];
    const isObj = (x: unknown): x is Record<string, unknown> => typeof x === 'object' && x !== null && !Array.isArray(x);
    out[k] = isObj(b) && isObj(v) ? deepMerge(b, v) : v;
  }
  return out;
}

/**
 * Per variant and workload, each feature against the full pipeline loaded at the same moment: its
 * cost is the median of the pairs' differences, with and without taken from the same pairs.
 */
export function featureRows(samples: readonly FeatureSample[], vs: readonly Pick<Variant, 'id' | 'feature' | 'relation'>[]): FeatureRow[] {
  const rows: FeatureRow[] = [];
  const of = (variant: string, workload: string) => samples.filter((s) => s.variant === variant && s.workload === workload);
  for (const workload of [...new Set(samples.map((s) => s.workload))]) {
    const full = of(FULL, workload);
    if (full.length === 0) continue;
    const fullUs = median(full.map((s) => s.cpuUsPerReq));
    for (const v of vs) {
      if (v.id === FULL) continue;
      const pairs = of(v.id, workload).flatMap((mine) => {
        const beside = full.find((f) => f.pair === mine.pair);
        return beside === undefined ? [] : [v.relation === 'off' ? { with: beside, without: mine } : { with: mine, without: beside }];
      });
      if (pairs.length === 0) continue;
      const withS = pairs.map((p) => p.with);
      const withoutS = pairs.map((p) => p.without);
      const costUs = median(pairs.map((p) => p.with.cpuUsPerReq - p.without.cpuUsPerReq));
      rows.push({
        workload,
        variant: v.id,
        feature: v.feature,
        withUs: median(withS.map((s) => s.cpuUsPerReq)),
        withoutUs: median(withoutS.map((s) => s.cpuUsPerReq)),
        costUs,
        shareOfFull: costUs / fullUs,
        withAllocBytes: featureAlloc(withS),
        withoutAllocBytes: featureAlloc(withoutS),
        withRuns: withS.map((s) => s.cpuUsPerReq),
        withoutRuns: withoutS.map((s) => s.cpuUsPerReq),
      });
    }
  }
  return rows;
}

/** The BENCHMARKS.md block: run conditions, notes, one table per workload. */
export function renderFeatures(report: FeaturesReport): string {
  const f = (v: number | null, digits = 1) => (v === null || !Number.isFinite(v) ? '-' : v.toFixed(digits));
  const range = (xs: readonly number[]) => (xs.length > 1 ? ` (${f(Math.min(...xs))}–${f(Math.max(...xs))})` : '');
  const kib = (b: number | null) => (b === null ? '-' : f(b / 1024));
  const m = report.machine;
  const o = report.options;
  const out = [
    `Run ${report.date} · ${m.cpus} CPUs · Node ${m.node} · 1-min load ${m.load1AtStart} at start, ${m.load1AtEnd} at end · ${o.connections} connections, ${o.warmupSeconds} s warm-up + ${o.seconds} s per load · ${o.rounds} rounds, each variant loaded once per round at the same moment as the full pipeline, in a different order each round; cost: the median over the rounds of the difference at the same moment; with and without: medians (range over the rounds) · edge from ${o.edgeFrom}`,
    '',
    ...report.notes.map((n) => `- ${n}`),
    ...report.orders.map((order, i) => `- round ${i + 1}: ${order.join(', ')}`),
    '',
  ];
  for (const workload of [...new Set(report.rows.map((r) => r.workload))]) {
    const full = report.samples.filter((s) => s.variant === FULL && s.workload === workload);
    out.push(
      `#### ${workload}`,
      '',
      `Full pipeline: ${f(median(full.map((s) => s.cpuUsPerReq)))} µs/req${range(full.map((s) => s.cpuUsPerReq))}, ${kib(featureAlloc(full))} KiB allocated/req.`,
      '',
      '| feature | µs/req with it | µs/req without | cost µs/req | share of the full pipeline | alloc KiB/req with / without |',
      '|---|---:|---:|---:|---:|---:|',
    );
    for (const r of report.rows.filter((x) => x.workload === workload)) {
      out.push(
        `| ${r.feature} | ${f(r.withUs)}${range(r.withRuns)} | ${f(r.withoutUs)}${range(r.withoutRuns)} | ${f(r.costUs)} | ${f(r.shareOfFull * 100)} % | ${kib(r.withAllocBytes)} / ${kib(r.withoutAllocBytes)} |`,
      );
    }
    out.push('');
  }
  return out.join('\n').trimEnd();
}

function featureAlloc(xs: readonly FeatureSample[]): number | null {
  const a = xs.flatMap((s) => (s.allocBytesPerReq === null ? [] : [s.allocBytesPerReq]));
  return a.length === 0 ? null : median(a);
}

interface FeaturesOptions {
  rounds: number;
  seconds: number;
  warmupSeconds: number;
  connections: number;
  workloads: readonly string[];
  only: ReadonlySet<string> | null;
  keys: number;
  fromSource: boolean;
  write: boolean;
  /** Run the alloc check (allocCheck) on the full pipeline instead of the variants. */
  allocCheck: boolean;
  log: (line: string) => void;
}

/** Starts every variant, loads them in interleaved rounds, returns (and unless told not to, writes) the report. */
export async function runFeatures(opts: FeaturesOptions): Promise<FeaturesReport> {
  const log = opts.log;
  const loads = workloads().filter((w) => opts.workloads.includes(w.name));
  if (loads.length === 0) throw new Error(`no known workload in ${opts.workloads.join(',')}`);
  const dir = await mkdtemp(join(tmpdir(), 'queen-edge-features-'));
  const cleanups: Array<() => Promise<void>> = [];
  const metering = meteringExtra();
  const report: FeaturesReport = {
    date: new Date().toISOString(),
    machine: { cpus: cpus().length, node: process.version, load1AtStart: loadAverage(), load1AtEnd: 0 },
    options: {
      rounds: opts.rounds,
      seconds: opts.seconds,
      warmupSeconds: opts.warmupSeconds,
      connections: opts.connections,
      edgeFrom: opts.fromSource ? 'tsx (source)' : 'tsc build',
      keys: opts.keys,
    },
    notes: [
      'cost = µs/req with the feature − without it, both loaded at the same moment (one CPU each), the median over the rounds; which of the two loads starts first alternates by round',
      'metrics: no config switch turns them off (`metrics.tenantLabels` only chooses the tenant labels), so no row',
      metering.on
        ? 'metering: the "without" variant omits the metering section bench/run.ts configures'
        : 'metering: no config switch (the schema has no metering section; app.ts always wires the meter), so no row',
    ],
    orders: [],
    samples: [],
    rows: [],
  };
  try {
    // Built before anything is measured: tsc must not overlap a load.
    const entry = await prepareEdgeEntry(opts.fromSource);
    const certs = await makeCertificate(dir);
    const double = await startDouble();
    cleanups.push(() => stopChild(double.child));
    const redis = await PrivateRedis.start();
    cleanups.push(() => redis.kill());
    const sink = await startOtlpSink();
    cleanups.push(() => sink.close());
    const known = variants(sink.url, metering);
    for (const id of opts.only ?? [])
      if (!known.some((v) => v.id === id)) throw new Error(`unknown variant "${id}" (known: ${known.map((v) => v.id).join(', ')})`);
    const all = known.filter((v) => v.id === FULL || (!opts.allocCheck && (!opts.only || opts.only.has(v.id))));
    if (opts.rounds < 3) report.notes.push(`only ${opts.rounds} round${opts.rounds > 1 ? 's' : ''}: a trial of the harness, not a measurement (use 3 or more)`);
    // Seeded before any edge starts, so every Redis-backed variant has the same key directory.
    let apiKey: string | null = null;
    if (all.some((v) => v.apiKey)) {
      const stats = await connectTest(redis.url, 2000);
      apiKey = await seedApiKeys(stats, opts.keys);
      stats.disconnect();
    }
    const jwt = await token({ roles: ['read-write'], tenant: BENCH_TENANT });
    const edges = new Map<string, EdgeProcess>();
    for (const v of all) {
      const port = await freePort();
      const input: EdgeConfigInput = {
        port,
        adminPort: await freePort(),
        cert: certs.cert,
        key: certs.key,
        brokerUrl: `http://127.0.0.1:${double.port}`,
        redisUrl: redis.url,
        jwksUrl: null,
        accessLog: true,
        workers: 1,
        upstreamConnections: 128,
        maxLongPollMs: 120_000,
        extra: metering.extra,
        ...v.input,
      };
      const config = deepMerge(edgeConfig(input), v.merge?.(port) ?? {});
      const edge = await startEdgeProcess(`features-${v.id}`, config, { dir, entry });
      cleanups.push(() => edge.stop());
      edges.set(v.id, edge);
    }
    log(
      `queen-edge features: ${all.map((v) => v.id).join(', ')} × ${loads.map((w) => w.name).join(', ')}, ${opts.rounds} rounds of ${opts.warmupSeconds} s warm-up + ${opts.seconds} s, ${opts.connections} connections; 1-min load ${report.machine.load1AtStart}`,
    );
    if (opts.allocCheck) {
      await allocCheck(edges.get(FULL)!, loads, { authorization: `Bearer ${jwt}` }, opts);
      return report;
    }
    const full = edges.get(FULL)!;
    const jwtHeaders = { authorization: `Bearer ${jwt}` };
    let pair = 0;
    for (let r = 0; r < opts.rounds; r++) {
      const order = roundOrder(
        all.filter((v) => v.id !== FULL),
        r,
      );
      report.orders.push(order.map((v) => v.id));
      log(`round ${r + 1}: ${order.map((v) => v.id).join(', ')}, each beside the full pipeline (${r % 2 === 0 ? 'its' : "the variant's"} load started first)`);
      for (const v of order) {
        const headers = { authorization: `Bearer ${v.apiKey ? apiKey : jwt}` };
        for (const w of loads) {
          pair++;
          const fullLoad = () => measureOnce(full, w, jwtHeaders, opts);
          const variantLoad = () => measureOnce(edges.get(v.id)!, w, headers, opts);
          const [sFull, sVariant] =
            r % 2 === 0 ? await Promise.all([fullLoad(), variantLoad()]) : await Promise.all([variantLoad(), fullLoad()]).then(([a, b]) => [b, a] as const);
          for (const [id, s] of [
            [FULL, sFull],
            [v.id, sVariant],
          ] as const) {
            report.samples.push({ round: r + 1, pair, variant: id, ...s });
            log(
              `  ${id.padEnd(14)} ${w.name.padEnd(9)} ${s.reqPerSec.toFixed(0).padStart(6)} req/s  cpu ${s.cpuUsPerReq.toFixed(1)} us/req` +
                `  alloc ${s.allocBytesPerReq === null ? '-' : (s.allocBytesPerReq / 1024).toFixed(1)} KiB/req` +
                `  GC ${s.gcMsPer10k?.toFixed(1) ?? '-'} ms/10k${s.bad > 0 ? `  bad answers ${s.bad}` : ''}`,
            );
          }
        }
      }
    }
    report.rows = featureRows(report.samples, all);
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }
  report.machine.load1AtEnd = loadAverage();
  if (opts.write) {
    const file = join(REPO_ROOT, 'bench', 'results', `${report.date.replace(/[:.]/g, '-')}-features.json`);
    await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
    await updateBenchmarksMd(join(REPO_ROOT, 'BENCHMARKS.md'), renderFeatures(report), 'features');
    log(`wrote ${file} and the features table in BENCHMARKS.md`);
  }
  return report;
}

/** What the probe does during a measured load: nothing, the GC window (the default), or the GC window and the heap sampler. */
type ProbeMode = 'none' | 'gc' | 'sampler';

/** The heap sampler's mean interval in the alloc check: V8's default. */
const SAMPLER_INTERVAL_BYTES = 32_768;

type Measured = Omit<FeatureSample, 'round' | 'pair' | 'variant'> & { sampledBytesPerReq: number | null };

/** One warm-up and one measured load of `edge`: CPU of its process tree, alloc and GC from its probe. */
async function measureOnce(
  edge: EdgeProcess,
  w: Workload,
  headers: Record<string, string>,
  opts: Pick<FeaturesOptions, 'seconds' | 'warmupSeconds' | 'connections'>,
  mode: ProbeMode = 'gc',
): Promise<Measured> {
  await runLoad(edge.base, w, { connections: opts.connections, seconds: opts.warmupSeconds, headers });
  if (mode !== 'none') await edge.startGc();
  if (mode === 'sampler') await edge.startSampling(SAMPLER_INTERVAL_BYTES);
  const load1 = loadAverage();
  const cpu0 = treeCpuSeconds(edge.pid);
  const r = await runLoad(edge.base, w, { connections: opts.connections, seconds: opts.seconds, headers });
  const cpu = treeCpuSeconds(edge.pid) - cpu0;
  const sampled = mode === 'sampler' ? await edge.stopSampling() : null;
  const gc: Partial<RunRecord> = gcColumns(mode === 'none' ? null : await edge.stopGc(), cpu, r.requests);
  return {
    workload: w.name,
    requests: r.requests,
    reqPerSec: r.reqPerSec,
    cpuUsPerReq: r.requests === 0 ? Number.NaN : (cpu / r.requests) * 1e6,
    allocBytesPerReq: gc.allocBytesPerReq ?? null,
    gcMsPer10k: gc.gcMsPer10k ?? null,
    gcShareOfCpu: gc.gcShareOfCpu ?? null,
    bad: r.errors + r.timeouts + r.unexpected,
    load1,
    sampledBytesPerReq: sampled === null || r.requests === 0 ? null : sampled / r.requests,
  };
}

/**
 * `--alloc-check`: the full pipeline's edge loaded in rounds with the probe idle, with the GC
 * window, and with the GC window and V8's sampling heap profiler: what each costs in CPU per
 * request, and whether the two byte counts agree. Printed only.
 */
async function allocCheck(edge: EdgeProcess, loads: readonly Workload[], headers: Record<string, string>, opts: FeaturesOptions): Promise<void> {
  const modes: ProbeMode[] = ['none', 'gc', 'sampler'];
  const got = new Map<string, Measured[]>();
  for (let r = 0; r < opts.rounds; r++) {
    for (const mode of roundOrder(modes, r)) {
      for (const w of loads) {
        const s = await measureOnce(edge, w, headers, opts, mode);
        const k = `${w.name} ${mode}`;
        got.set(k, [...(got.get(k) ?? []), s]);
        opts.log(
          `  ${mode.padEnd(8)} ${w.name.padEnd(9)} cpu ${s.cpuUsPerReq.toFixed(1)} us/req  GC-window alloc ${s.allocBytesPerReq === null ? '-' : (s.allocBytesPerReq / 1024).toFixed(2)} KiB/req  sampler ${s.sampledBytesPerReq === null ? '-' : (s.sampledBytesPerReq / 1024).toFixed(2)} KiB/req`,
        );
      }
    }
  }
  for (const w of loads) {
    const cpu = (mode: ProbeMode) => median(got.get(`${w.name} ${mode}`)!.map((s) => s.cpuUsPerReq));
    const ratios = got
      .get(`${w.name} sampler`)!
      .flatMap((s) => (s.allocBytesPerReq && s.sampledBytesPerReq ? [s.sampledBytesPerReq / s.allocBytesPerReq] : []));
    opts.log(
      `median ${w.name}: cpu idle probe ${cpu('none').toFixed(1)}, GC window ${cpu('gc').toFixed(1)} (${((cpu('gc') / cpu('none') - 1) * 100).toFixed(1)} %), GC window + sampler ${cpu('sampler').toFixed(1)} us/req (${((cpu('sampler') / cpu('none') - 1) * 100).toFixed(1)} %); sampler bytes / GC-window bytes ${ratios.length ? median(ratios).toFixed(3) : '-'}`,
    );
  }
}

export function parseFeaturesArgs(
  argv: readonly string[],
  log: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
): FeaturesOptions & { render?: string } {
  const { values: v } = parseArgs({
    args: [...argv],
    options: {
      rounds: { type: 'string', default: '3' },
      seconds: { type: 'string', default: '6' },
      warmup: { type: 'string', default: '2' },
      connections: { type: 'string', default: '50' },
      workloads: { type: 'string', default: 'push-64B,pop' },
      only: { type: 'string' },
      keys: { type: 'string', default: String(BENCH_KEYS) },
      tsx: { type: 'boolean', default: false },
      'no-write': { type: 'boolean', default: false },
      render: { type: 'string' },
      'alloc-check': { type: 'boolean', default: false },
    },
    strict: true,
  });
  const rounds = Math.floor(Number(v.rounds));
  if (!(rounds >= 1)) throw new Error('--rounds must be at least 1');
  return {
    rounds,
    seconds: Number(v.seconds),
    warmupSeconds: Number(v.warmup),
    connections: Number(v.connections),
    workloads: v.workloads.split(',').map((s) => s.trim()),
    only: v.only ? new Set(v.only.split(',').map((s) => s.trim())) : null,
    keys: Number(v.keys),
    fromSource: v.tsx,
    write: !v['no-write'] && !v['alloc-check'],
    allocCheck: v['alloc-check'],
    log,
    ...(v.render ? { render: v.render } : {}),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const opts = parseFeaturesArgs(process.argv.slice(2));
  if (opts.render) {
    // Re-renders the BENCHMARKS.md block from a saved run (after a change of the layout).
    const saved = JSON.parse(await readFile(opts.render, 'utf8')) as FeaturesReport;
    await updateBenchmarksMd(join(REPO_ROOT, 'BENCHMARKS.md'), renderFeatures(saved), 'features');
  } else await runFeatures(opts);
}
