/**
 * `npm run bench`: what the edge costs against direct access and nginx, on this machine, in one
 * invocation (so the ratios compare runs under the same conditions). See BENCHMARKS.md for the
 * method and why CPU per request is the headline (BENCHMARKS.md).
 *
 * Options: --quick (short runs, one workload, no long polls), --only <scenarios> (see SCENARIOS),
 * --seconds N (default 6), --warmup N, --connections N, --h2-streams N, --polls 1000,10000,
 * --hold N (long-poll hold, s), --profile (CPU profile of the full pipeline), --tsx (edge from
 * source instead of a tsc build), --no-write, --render <results.json> (rewrite the BENCHMARKS.md block
 * from a saved run).
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs as parseCli } from 'node:util';
import { SignJWT } from 'jose';
import type { Redis } from 'ioredis';
import { configSchema } from '../src/config/schema.js';
import { mintKey } from '../src/keys/format.js';
import { apiKeyKeys } from '../src/redis/keys.js';
import { commandCalls, connectTest, PrivateRedis } from '../test/helpers/redis.js';
import { startJwksServer, type JwksServer } from '../test/helpers/jwks-server.js';
import { keyPair, signWith } from '../test/helpers/tokens.js';
import {
  BENCH_REDIS_PREFIX,
  BENCH_SECRET,
  BENCH_TENANT,
  edgeConfig,
  prepareBenchModule,
  prepareEdgeEntry,
  THROTTLED_HOST,
  THROTTLED_TENANT,
  REPO_ROOT,
  probeClient,
  startEdgeProcess,
  type EdgeConfigInput,
  type EdgeEntry,
  type EdgeProcess,
  type Probe,
} from './edge.js';
import { startFastDouble } from './double.js';
import type { GcReading } from './probe.js';
import { startOtlpSink, type OtlpSink } from './otlp-sink.js';
import { runLoad, type LoadResult, type Workload } from './load.js';
import { H2LOAD_HINT, h2loadAvailable, runH2Load } from './h2load.js';
import { PARK_TIMEOUT_MS, runLongPolls, type LongPollResult } from './longpoll.js';
import { NGINX_HINT, nginxBinary, startNginx } from './nginx.js';
import { summarizeProfile, type ProfileSummary } from './profile.js';
import { childFileLimit, freePort, loadAverage, makeCertificate, nodeProcessCount, sleep, spawnWithLimits, stopChild, treeCpuSeconds } from './procs.js';
import { renderMarkdown, updateBenchmarksMd } from './report.js';

/** Scenario ids, in the order they run. */
export const SCENARIOS = [
  'direct',
  'nginx',
  'floor',
  'edge',
  'full',
  'full-rs256',
  'full-key',
  'full-trace-1',
  'full-trace-100',
  'leased',
  'workers',
  'h2-floor',
  'h2-edge',
  'h2-full',
  'throttled',
  'h2-throttled',
  'longpoll',
  'h2-longpoll',
] as const;
export type ScenarioId = (typeof SCENARIOS)[number];

/** Scenarios whose proxy does not talk to the private Redis, or (long polls) gets no Redis column. */
const NO_REDIS_COLUMN: ReadonlySet<ScenarioId> = new Set(['direct', 'nginx', 'floor', 'edge', 'h2-floor', 'h2-edge', 'longpoll', 'h2-longpoll']);
/** Scenarios whose proxy talks to the private Redis (the others get no Redis column). */
const USES_REDIS: ReadonlySet<ScenarioId> = new Set(SCENARIOS.filter((s) => !NO_REDIS_COLUMN.has(s)));

/** Scenarios loaded over HTTP/2 by h2load (the others over HTTP/1.1 by autocannon). */
export const H2_SCENARIOS: ReadonlySet<ScenarioId> = new Set(['h2-floor', 'h2-edge', 'h2-full', 'h2-throttled']);

/** h2 load shape: this many connections, each with `--h2-streams` (default H2_STREAMS) concurrent streams. */
export const H2_CLIENTS = 2;
export const H2_STREAMS = 100;

/** What each scenario is, for the table and the JSON. */
export const SCENARIO_LABELS: Record<ScenarioId, string> = {
  direct: '1. double direct (ceiling)',
  nginx: '2. nginx TLS → double',
  floor: '2b. floor: bare Node TLS forwarder (node:https + undici)',
  edge: '3. queen-edge plain forwarding',
  full: '4. queen-edge full pipeline (HS256)',
  'full-rs256': '4b. full pipeline, RS256 via JWKS',
  'full-key': '4d. full pipeline, a tenant API key among 100,000',
  'full-trace-1': '4e. full pipeline, tracing on, 1 % sampled',
  'full-trace-100': '4f. full pipeline, tracing on, every request sampled',
  leased: '4c. full pipeline, limits.mode: leased',
  workers: '5. full pipeline, server.workers: 2',
  'h2-floor': '7a. h2 floor (node:http2 + undici)',
  'h2-edge': '7b. queen-edge plain forwarding, h2',
  'h2-full': '7c. full pipeline, h2',
  throttled: '8. full pipeline, tenant throttled to 1 req/s (429s), h1',
  'h2-throttled': '8b. full pipeline, tenant throttled to 1 req/s (429s), h2',
  longpoll: '6. parked long polls',
  'h2-longpoll': '6b. parked long polls over h2 (250 streams per connection)',
};

/** Options of one invocation. */
export interface BenchOptions {
  quick: boolean;
  only: ReadonlySet<ScenarioId> | null;
  seconds: number;
  warmupSeconds: number;
  connections: number;
  /** Concurrent streams per h2 connection. */
  h2Streams: number;
  polls: readonly number[];
  holdSeconds: number;
  /** Runs every load scenario this many times, interleaved; the tables show each row's median. */
  repeat: number;
  profile: boolean;
  /** Run the edge from src/ with tsx instead of a tsc build (faster start, slower requests). */
  fromSource: boolean;
  /** Write bench/results/<date>.json and the table in BENCHMARKS.md. */
  write: boolean;
  log: (line: string) => void;
}

/** One measured load run. */
export interface RunRecord extends LoadResult {
  scenario: ScenarioId;
  workload: string;
  proxyCpuSeconds: number | null;
  cpuUsPerReq: number | null;
  cpuSecondsPer10k: number | null;
  doubleCpuUsPerReq: number;
  redisCommandsPerReq: number | null;
  redisEvalshaPerReq: number | null;
  /** Per command, per request (commands run inside the limiter's script are counted by Redis too). */
  redisByCommand: Record<string, number> | null;
  load1: number;
  /** V8 heap bytes the proxy allocated per request (bench/probe.ts); null where no probe runs (direct, nginx, workers). */
  allocBytesPerReq?: number | null;
  /** Main-thread GC pause time per 10,000 requests, ms. */
  gcMsPer10k?: number | null;
  /** GC pause time as a share of the proxy's CPU time over the window (0..1). */
  gcShareOfCpu?: number | null;
  /** The probe's GC counts and times by kind over the measured window. */
  gc?: Omit<GcReading, 'type'> | null;
  /** CPU µs per request of every repetition of this row (one value without --repeat). */
  cpuUsPerReqRuns?: number[];
}

/** A long-poll run with the Redis commands it caused, per poll (admission and release). */
export type LongPollRecord = LongPollResult & { redisCommandsPerPoll: number | null };

/** The whole result document (bench/results/<date>.json). */
export interface BenchReport {
  date: string;
  machine: { cpus: number; node: string; load1AtStart: number; load1AtEnd: number };
  options: {
    seconds: number;
    warmupSeconds: number;
    connections: number;
    h2Connections?: number;
    h2Streams?: number;
    repeat?: number;
    quick: boolean;
    edgeFrom: 'tsc build' | 'tsx (source)';
  };
  notes: string[];
  skipped: Partial<Record<ScenarioId, string>>;
  runs: RunRecord[];
  longPolls: LongPollRecord[];
  profile: (ProfileSummary & { file: string }) | null;
}

/** Push bodies of exactly 64 bytes and 8 KiB; a pop returning the double's ~580-byte batch. */
export function workloads(): Workload[] {
  const push = (name: string, size: number): Workload => {
    const shell = (pad: string) => `{"items":[{"queue":"bench","payload":{"p":"${pad}"}}]}`;
    const body = Buffer.from(shell('x'.repeat(size - shell('').length)));
    if (body.length !== size) throw new Error(`push body is ${body.length} bytes, not ${size}`);
    return { name, method: 'POST', path: '/api/v1/push', body, expectStatus: 201 };
  };
  return [
    push('push-64B', 64),
    push('push-8KiB', 8192),
    { name: 'pop', method: 'GET', path: '/api/v1/pop/queue/bench?batch=10', body: null, expectStatus: 200 },
  ];
}

/**
 * The throttled rows: a 429 for a request without a body (a pop) and for a 1 MiB push, both from
 * the deny cache once the tenant's one request per second is spent. About one request a second is
 * admitted (2xx) and counted as a bad answer of these rows.
 */
export function throttledWorkloads(): Workload[] {
  const push = Buffer.from(`{"items":[{"queue":"bench","payload":{"p":"${'x'.repeat(1_048_576 - 48)}"}}]}`);
  if (push.length !== 1_048_576) throw new Error(`1 MiB push is ${push.length} bytes`);
  return [
    { name: '429 no body', method: 'GET', path: '/api/v1/pop/queue/bench?batch=10', body: null, expectStatus: 429 },
    { name: '429 1MiB body', method: 'POST', path: '/api/v1/push', body: push, expectStatus: 429 },
  ];
}

/** Parses argv into options (`--render FILE` is read by the entry point, so it is accepted here). */
export function parseArgs(argv: readonly string[], log: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): BenchOptions {
  const { values: v } = parseCli({
    args: [...argv],
    options: {
      quick: { type: 'boolean', default: false },
      only: { type: 'string' },
      seconds: { type: 'string' },
      warmup: { type: 'string' },
      connections: { type: 'string', default: '50' },
      'h2-streams': { type: 'string', default: String(H2_STREAMS) },
      polls: { type: 'string', default: '1000,10000' },
      hold: { type: 'string', default: '15' },
      repeat: { type: 'string', default: '1' },
      profile: { type: 'boolean', default: false },
      tsx: { type: 'boolean', default: false },
      'no-write': { type: 'boolean', default: false },
      render: { type: 'string' },
    },
    strict: true,
  });
  const quick = v.quick;
  const only = v.only ? new Set(v.only.split(',').map((s) => s.trim()) as ScenarioId[]) : null;
  for (const s of only ?? []) if (!SCENARIOS.includes(s)) throw new Error(`unknown scenario "${s}" (known: ${SCENARIOS.join(', ')})`);
  return {
    quick,
    only,
    seconds: Number(v.seconds ?? (quick ? 2 : 6)),
    warmupSeconds: Number(v.warmup ?? (quick ? 0.5 : 2)),
    connections: Number(v.connections),
    h2Streams: Number(v['h2-streams']),
    polls: v.polls.split(',').map(Number),
    holdSeconds: Number(v.hold),
    repeat: Math.max(1, Math.floor(Number(v.repeat))),
    profile: v.profile,
    fromSource: v.tsx,
    write: !v['no-write'],
    log,
  };
}

/** Starts a bench process that reports `{ port }` over IPC once it listens. */
export async function startReporting(argv: readonly string[], name: string, env: Record<string, string> = {}): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(argv[0]!, argv.slice(1), { cwd: REPO_ROOT, stdio: ['ignore', 'inherit', 'inherit', 'ipc'], env: { ...process.env, ...env } });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`${name} exited with ${code}`)));
  });
  return { child, port };
}

export const startDouble = () => startReporting([process.execPath, '--import', 'tsx', 'bench/double.ts'], 'broker double');

/** API keys in the directory for the key row: the request's lookup must cost the same as with a handful. */
export const BENCH_KEYS = 100_000;

/**
 * Writes `n` tenant API key records into the bench Redis (the layout of src/redis/keys.ts, the
 * prefix of bench/edge.ts), one of them a real key of the bench tenant; returns that key.
 */
export async function seedApiKeys(redis: Redis, n: number): Promise<string> {
  const keys = apiKeyKeys(BENCH_REDIS_PREFIX);
  const used = mintKey();
  const record = (id: string, hash: string) =>
    JSON.stringify({ id, tenant: BENCH_TENANT, name: 'bench', roles: ['read-write'], createdAt: Date.now(), expiresAt: null, hash });
  for (let i = 0; i < n; i += 5000) {
    const batch = redis.pipeline();
    for (let j = i; j < Math.min(n, i + 5000); j++) {
      const k = j === 0 ? used : mintKey();
      batch.set(keys.key(k.id), record(k.id, k.hash)).sadd(keys.tenant(BENCH_TENANT), k.id);
    }
    await batch.exec();
  }
  return used.key;
}

/**
 * The config of an edge measured beside another process (bench/paired.ts, bench/perf-split.ts):
 * plain forwarding, or with `full` the full pipeline (its Redis, the access log, metering).
 */
export async function sideConfig(o: {
  cert: string;
  key: string;
  brokerUrl: string;
  redisUrl: string | null;
  full: boolean;
}): Promise<Record<string, unknown>> {
  return edgeConfig({
    port: await freePort(),
    adminPort: await freePort(),
    cert: o.cert,
    key: o.key,
    brokerUrl: o.brokerUrl,
    redisUrl: o.redisUrl,
    jwksUrl: null,
    accessLog: o.full,
    workers: 1,
    upstreamConnections: 128,
    maxLongPollMs: 120_000,
    extra: o.full ? meteringExtra().extra : {},
  });
}

export function token(claims: Record<string, unknown>): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('bench')
    .setIssuedAt()
    .setExpirationTime('2h')
    .sign(new TextEncoder().encode(BENCH_SECRET));
}

/** A metering section, when the schema has one (the metering feature may land after this file). */
export function meteringExtra(): { extra: Record<string, unknown>; on: boolean } {
  const shape = (configSchema as unknown as { shape?: Record<string, unknown> }).shape;
  return shape && 'metering' in shape ? { extra: { metering: {} }, on: true } : { extra: {}, on: false };
}

/** Runs the scenarios; returns the report (and writes it unless `write` is false). */
export async function runBench(opts: BenchOptions): Promise<BenchReport> {
  const wanted = (s: ScenarioId) =>
    opts.only
      ? opts.only.has(s)
      : !(opts.quick && (s === 'longpoll' || s === 'h2-longpoll' || s === 'full-rs256' || s === 'full-key' || s === 'full-trace-1' || s === 'full-trace-100'));
  const all = workloads();
  const loads = opts.quick ? all.slice(0, 1) : all;
  const dir = await mkdtemp(join(tmpdir(), 'queen-edge-bench-'));
  const report: BenchReport = {
    date: new Date().toISOString(),
    machine: { cpus: (await import('node:os')).cpus().length, node: process.version, load1AtStart: loadAverage(), load1AtEnd: 0 },
    options: {
      seconds: opts.seconds,
      warmupSeconds: opts.warmupSeconds,
      connections: opts.connections,
      h2Connections: H2_CLIENTS,
      h2Streams: opts.h2Streams,
      repeat: opts.repeat,
      quick: opts.quick,
      edgeFrom: opts.fromSource ? 'tsx (source)' : 'tsc build',
    },
    notes: [],
    skipped: {},
    runs: [],
    longPolls: [],
    profile: null,
  };
  const cleanups: Array<() => Promise<void>> = [];
  const log = opts.log;
  log(
    `queen-edge bench: ${loads.map((w) => w.name).join(', ')} × ${opts.connections} connections, ${opts.warmupSeconds}s warm-up + ${opts.seconds}s; 1-min load ${report.machine.load1AtStart}`,
  );
  try {
    const certs = await makeCertificate(dir);
    const double = await startDouble();
    cleanups.push(() => stopChild(double.child));
    const brokerUrl = `http://127.0.0.1:${double.port}`;
    // The throttled tenant's own broker, in this process: it answers one request a second at most.
    const throttledDouble = await startFastDouble(0);
    cleanups.push(() => throttledDouble.close());
    const edgeToken = await token({ roles: ['read-write'], tenant: BENCH_TENANT });

    let redis: PrivateRedis | null = null;
    let stats: Redis | null = null;
    // Long polls park slots in Redis too, though the table shows no Redis column for them.
    const needsRedis = [...USES_REDIS, 'longpoll' as const, 'h2-longpoll' as const].some(wanted);
    if (needsRedis) {
      redis = await PrivateRedis.start();
      cleanups.push(() => redis!.kill());
      stats = await connectTest(redis.url, 2000);
      cleanups.push(async () => void stats!.disconnect());
    }
    let jwks: JwksServer | null = null;
    let rsToken: string | null = null;
    if (wanted('full-rs256')) {
      const pair = await keyPair('RS256');
      jwks = await startJwksServer([pair.publicJwk]);
      cleanups.push(() => jwks!.close());
      rsToken = await signWith(pair, {
        sub: 'bench',
        roles: ['read-write'],
        tenant: BENCH_TENANT,
        iat: Math.floor(Date.now() / 1000),
        exp: Math.floor(Date.now() / 1000) + 7200,
      });
    }
    const metering = meteringExtra();
    report.notes.push(
      metering.on
        ? 'metering: on (the schema has a metering section; its defaults were used)'
        : 'metering: the config schema has no metering section, so the bench configured none; whatever app.ts wires by default ran (src/metering/* in the profile when it does)',
    );

    /** A measured proxy: its pid (CPU of its tree) and, when bench/probe.ts is preloaded into it, the probe. */
    type Proxy = { readonly pid: number; readonly probe?: Probe };
    const measure = async (scenario: ScenarioId, base: string, headers: Record<string, string>, proxy: Proxy | null, rows: readonly Workload[] = loads) => {
      const load = (w: Workload, seconds: number): Promise<LoadResult> =>
        H2_SCENARIOS.has(scenario)
          ? runH2Load(base, w, { clients: H2_CLIENTS, streams: opts.h2Streams, seconds, headers })
          : runLoad(base, w, { connections: opts.connections, seconds, headers });
      const proxyPid = proxy?.pid ?? null;
      for (const w of rows) {
        await load(w, opts.warmupSeconds);
        await proxy?.probe?.startGc();
        const before = await snapshot(proxyPid, double.child.pid!, stats);
        const load1 = loadAverage();
        const r = await load(w, opts.seconds);
        const after = await snapshot(proxyPid, double.child.pid!, stats);
        const gc = proxy?.probe ? await proxy.probe.stopGc() : null;
        const cpu = proxyPid === null ? null : after.proxyCpu - before.proxyCpu;
        const per = (x: number | null) => (x === null || r.requests === 0 ? null : x / r.requests);
        const rec: RunRecord = {
          ...r,
          scenario,
          workload: w.name,
          proxyCpuSeconds: cpu,
          cpuUsPerReq: cpu === null ? null : (per(cpu) ?? 0) * 1e6,
          cpuSecondsPer10k: cpu === null ? null : (per(cpu) ?? 0) * 1e4,
          doubleCpuUsPerReq: (per(after.doubleCpu - before.doubleCpu) ?? 0) * 1e6,
          redisCommandsPerReq: stats && USES_REDIS.has(scenario) ? per(after.calls - before.calls) : null,
          redisEvalshaPerReq: stats && USES_REDIS.has(scenario) ? per(after.evalsha - before.evalsha) : null,
          redisByCommand: stats && USES_REDIS.has(scenario) && r.requests > 0 ? perCommand(before.byCommand, after.byCommand, r.requests) : null,
          load1,
          ...gcColumns(gc, cpu, r.requests),
        };
        report.runs.push(rec);
        log(
          `  ${scenario.padEnd(10)} ${w.name.padEnd(9)} ${r.reqPerSec.toFixed(0).padStart(6)} req/s  p50 ${r.p50Ms.toFixed(2)} p99 ${r.p99Ms.toFixed(2)} p99.9 ${r.p999Ms.toFixed(2)} ms` +
            `  cpu ${rec.cpuUsPerReq === null ? '-' : rec.cpuUsPerReq.toFixed(1)} us/req` +
            (rec.redisCommandsPerReq === null ? '' : `  redis ${rec.redisCommandsPerReq.toFixed(2)} cmd/req`) +
            (rec.allocBytesPerReq == null
              ? ''
              : `  alloc ${(rec.allocBytesPerReq / 1024).toFixed(1)} KiB/req  GC ${rec.gcMsPer10k?.toFixed(1)} ms/10k (${((rec.gcShareOfCpu ?? 0) * 100).toFixed(1)} % of CPU)`) +
            (r.errors + r.timeouts + r.unexpected > 0
              ? `  errors ${r.errors} timeouts ${r.timeouts} unexpected ${r.unexpected} ${JSON.stringify(r.statusCounts)}`
              : ''),
        );
      }
    };
    const edgeInput = (o: Partial<EdgeConfigInput>): EdgeConfigInput => ({
      port: 0,
      adminPort: 0,
      cert: certs.cert,
      key: certs.key,
      brokerUrl,
      throttledBrokerUrl: `http://127.0.0.1:${throttledDouble.port}`,
      redisUrl: null,
      jwksUrl: null,
      accessLog: false,
      workers: 1,
      upstreamConnections: 128,
      maxLongPollMs: 120_000,
      extra: {},
      ...o,
    });
    // Built before any measurement: tsc is a CPU hog that must not overlap a run.
    const entry: EdgeEntry | null =
      SCENARIOS.some((x) => x !== 'direct' && x !== 'nginx' && !x.endsWith('floor') && wanted(x)) || opts.profile
        ? await prepareEdgeEntry(opts.fromSource)
        : null;
    const floorEntry = wanted('floor') || wanted('h2-floor') ? await prepareBenchModule('floor', opts.fromSource, true) : null;
    const withFloor = async (proto: 'h1' | 'h2', body: (base: string, floor: Proxy) => Promise<void>) => {
      // The probe in the floor too: its allocations and GC are the reference for the edge's.
      const floor = await startReporting([...floorEntry!, certs.cert, certs.key, brokerUrl, proto], 'floor forwarder', { QE_BENCH_PROBE: '1' });
      try {
        await body(`https://127.0.0.1:${floor.port}`, { pid: floor.child.pid!, probe: probeClient(floor.child) });
      } finally {
        await stopChild(floor.child);
      }
    };
    const h2 = SCENARIOS.some((x) => H2_SCENARIOS.has(x) && wanted(x)) && h2loadAvailable();
    if (!h2) for (const x of SCENARIOS) if (H2_SCENARIOS.has(x) && wanted(x)) report.skipped[x] = H2LOAD_HINT;
    const withEdge = async (name: string, input: Partial<EdgeConfigInput>, body: (edge: EdgeProcess) => Promise<void>) => {
      const config = edgeConfig(edgeInput({ port: await freePort(), adminPort: await freePort(), ...input }));
      const edge = await startEdgeProcess(name, config, { dir, entry: entry! });
      try {
        await body(edge);
      } finally {
        await edge.stop();
      }
    };
    const fullInput = (o: Partial<EdgeConfigInput> = {}): Partial<EdgeConfigInput> => ({
      redisUrl: redis?.url ?? null,
      accessLog: true,
      extra: metering.extra,
      ...o,
    });
    const bearer = { authorization: `Bearer ${edgeToken}` };
    // A collector for the tracing rows, in this process: its CPU is not the edge's.
    let collector: OtlpSink | null = null;
    if (wanted('full-trace-1') || wanted('full-trace-100')) {
      collector = await startOtlpSink();
      cleanups.push(() => collector!.close());
    }
    const tracing = (ratio: number) => ({ tracing: { enabled: true, endpoint: collector!.url, ratio } });

    for (let rep = 1; rep <= opts.repeat; rep++) {
      if (opts.repeat > 1) log(`repetition ${rep} of ${opts.repeat}`);
      if (wanted('direct')) {
        log(SCENARIO_LABELS.direct);
        await measure('direct', brokerUrl, bearer, null);
      }
      if (wanted('nginx')) {
        log(SCENARIO_LABELS.nginx);
        const bin = nginxBinary();
        if (bin === null) {
          report.skipped.nginx = NGINX_HINT;
          log(`  skipped: ${NGINX_HINT}`);
        } else {
          const port = await freePort();
          const nginx = await startNginx(bin, { dir: join(dir, 'nginx'), port, upstreamPort: double.port, ...certs });
          try {
            await measure('nginx', `https://127.0.0.1:${port}`, bearer, { pid: nginx.pid! });
          } finally {
            await stopChild(nginx);
          }
        }
      }
      if (wanted('floor')) {
        log(SCENARIO_LABELS.floor);
        await withFloor('h1', (base, floor) => measure('floor', base, bearer, floor));
      }
      if (wanted('edge')) {
        log(SCENARIO_LABELS.edge);
        await withEdge('edge-plain', {}, (edge) => measure('edge', edge.base, bearer, edge));
      }
      if (wanted('full')) {
        log(SCENARIO_LABELS.full);
        await withEdge('edge-full', fullInput(), (edge) => measure('full', edge.base, bearer, edge));
      }
      if (wanted('full-rs256')) {
        log(SCENARIO_LABELS['full-rs256']);
        await withEdge('edge-full-rs256', fullInput({ jwksUrl: jwks!.url }), (edge) =>
          measure('full-rs256', edge.base, { authorization: `Bearer ${rsToken}` }, edge),
        );
      }
      if (wanted('full-key')) {
        log(SCENARIO_LABELS['full-key']);
        const key = await seedApiKeys(stats!, BENCH_KEYS);
        await withEdge('edge-full-key', fullInput(), (edge) => measure('full-key', edge.base, { authorization: `Bearer ${key}` }, edge));
      }
      for (const [id, ratio] of [
        ['full-trace-1', 0.01],
        ['full-trace-100', 1],
      ] as const) {
        if (!wanted(id)) continue;
        log(SCENARIO_LABELS[id]);
        await withEdge(`edge-${id}`, fullInput({ extra: { ...metering.extra, ...tracing(ratio) } }), (edge) => measure(id, edge.base, bearer, edge));
      }
      if (wanted('leased')) {
        log(SCENARIO_LABELS.leased);
        await withEdge('edge-leased', fullInput({ extra: { ...metering.extra, limits: { mode: 'leased' } } }), (edge) =>
          measure('leased', edge.base, bearer, edge),
        );
      }
      if (wanted('workers')) {
        log(SCENARIO_LABELS.workers);
        await withEdge('edge-workers', fullInput({ workers: 2 }), async (edge) => {
          await sleep(500);
          const processes = nodeProcessCount(edge.pid);
          if (processes < 2) {
            report.skipped.workers = `server.workers: 2 started ${processes} node process: the workers feature is not implemented yet`;
            log(`  skipped: ${report.skipped.workers}`);
            return;
          }
          report.notes.push(`workers: ${processes} node processes (primary and workers); CPU is the sum over all of them`);
          // The probe sees the primary only, not the workers that serve: no alloc/GC figures for this row.
          await measure('workers', edge.base, bearer, { pid: edge.pid });
        });
      }
      if (h2 && wanted('h2-floor')) {
        log(SCENARIO_LABELS['h2-floor']);
        await withFloor('h2', (base, floor) => measure('h2-floor', base, bearer, floor));
      }
      if (h2 && wanted('h2-edge')) {
        log(SCENARIO_LABELS['h2-edge']);
        await withEdge('edge-plain-h2', {}, (edge) => measure('h2-edge', edge.base, bearer, edge));
      }
      if (h2 && wanted('h2-full')) {
        log(SCENARIO_LABELS['h2-full']);
        await withEdge('edge-full-h2', fullInput(), (edge) => measure('h2-full', edge.base, bearer, edge));
      }
      for (const x of SCENARIOS) if (report.skipped[x] === H2LOAD_HINT) log(`  skipped ${x}: ${H2LOAD_HINT}`);
      if (wanted('throttled')) {
        log(SCENARIO_LABELS.throttled);
        const throttledToken = await token({ roles: ['read-write'], tenant: THROTTLED_TENANT });
        await withEdge('edge-throttled', fullInput(), (edge) =>
          measure('throttled', edge.base, { authorization: `Bearer ${throttledToken}`, host: THROTTLED_HOST }, edge, throttledWorkloads()),
        );
      }
      if (h2 && wanted('h2-throttled')) {
        log(SCENARIO_LABELS['h2-throttled']);
        const throttledToken = await token({ roles: ['read-write'], tenant: THROTTLED_TENANT });
        await withEdge('edge-throttled-h2', fullInput(), (edge) =>
          measure('h2-throttled', edge.base, { authorization: `Bearer ${throttledToken}`, ':authority': THROTTLED_HOST }, edge, throttledWorkloads()),
        );
      }
    }
    if (opts.repeat > 1) report.runs = medianRows(report.runs);
    report.notes = [...new Set(report.notes)];
    for (const proto of ['h1', 'h2'] as const) {
      const id = proto === 'h1' ? 'longpoll' : 'h2-longpoll';
      if (!wanted(id)) continue;
      log(SCENARIO_LABELS[id]);
      // A parked poll holds its upstream socket in the edge, and over h1 its client socket too;
      // over h2 the client sockets are one per H2_POLLS_PER_SESSION polls.
      const perPoll = proto === 'h1' ? 2 : 1;
      const maxPolls = Math.floor((childFileLimit() - 1000) / perPoll);
      for (const asked of opts.polls) {
        const n = Math.min(asked, maxPolls);
        if (n < asked)
          report.notes.push(
            `long polls (${proto}): ${asked} asked, ${n} run: the file-descriptor hard limit here is ${childFileLimit()} and cannot be raised (no CAP_SYS_RESOURCE); a parked poll needs ${perPoll} descriptor${perPoll > 1 ? 's' : ''} in the edge`,
          );
        await withEdge(`edge-${id}-${n}`, fullInput({ upstreamConnections: n + 1024, maxLongPollMs: PARK_TIMEOUT_MS }), async (edge) => {
          const before = stats ? await redisTotals(stats) : null;
          const r = await runLongPolls(edge, double.port, n, opts.holdSeconds, edgeToken, proto);
          const after = stats ? await redisTotals(stats) : null;
          report.longPolls.push({ ...r, redisCommandsPerPoll: before && after ? (after.calls - before.calls) / n : null });
          log(
            `  ${n} polls (${proto}): parked ${r.parkedAtPeak} in ${r.secondsToPark.toFixed(1)} s; RSS ${r.rssBeforeMiB.toFixed(0)} → ${r.rssPeakMiB.toFixed(0)} MiB (${r.rssPerPollKiB.toFixed(1)} KiB/poll, V8 heap ${r.heapPerPollKiB.toFixed(1)}); loop delay p99 ${r.loopDelayP99Ms.toFixed(1)} ms max ${r.loopDelayMaxMs.toFixed(1)} ms; probe push p99 ${r.probeP99Ms.toFixed(1)} ms; ${r.answered204} answered 204`,
          );
        });
      }
    }
    if (opts.profile) {
      log('profile: full pipeline, push-64B, V8 CPU profiler over the measured window');
      const kept = join(REPO_ROOT, 'bench', 'results', `profile-full-${report.date.slice(0, 10)}.cpuprofile`);
      await withEdge('edge-profile', fullInput(), async (edge) => {
        await runLoad(edge.base, all[0]!, { connections: opts.connections, seconds: opts.warmupSeconds, headers: bearer });
        await edge.startProfile();
        await runLoad(edge.base, all[0]!, { connections: opts.connections, seconds: opts.seconds, headers: bearer });
        await edge.stopProfile(kept);
      });
      report.profile = { file: kept, ...(await summarizeProfile(kept)) };
      log(`  profile: ${kept}`);
      for (const l of report.profile.inclusiveByArea.slice(0, 15)) log(`    ${l.pct.toFixed(1).padStart(5)}%  ${l.name}`);
    }
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    await rm(dir, { recursive: true, force: true });
  }
  report.machine.load1AtEnd = loadAverage();
  if (opts.write) {
    const file = join(REPO_ROOT, 'bench', 'results', `${report.date.replace(/[:.]/g, '-')}.json`);
    await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
    await updateBenchmarksMd(join(REPO_ROOT, 'BENCHMARKS.md'), renderMarkdown(report, SCENARIO_LABELS));
    log(`wrote ${file} and the table in BENCHMARKS.md`);
  }
  return report;
}

/**
 * One row per scenario and workload: the repetition with the median CPU per request (req/s for
 * the direct row, which has no proxy), with every repetition's CPU kept for the spread.
 */
function medianRows(runs: readonly RunRecord[]): RunRecord[] {
  const groups = new Map<string, RunRecord[]>();
  for (const r of runs) {
    const k = `${r.scenario}\u0000${r.workload}`;
    const g = groups.get(k);
    if (g) g.push(r);
    else groups.set(k, [r]);
  }
  return [...groups.values()].map((g) => {
    const key = (r: RunRecord) => r.cpuUsPerReq ?? -r.reqPerSec;
    const sorted = [...g].sort((x, y) => key(x) - key(y));
    const median = sorted[Math.floor((sorted.length - 1) / 2)]!;
    return { ...median, cpuUsPerReqRuns: g.flatMap((r) => (r.cpuUsPerReq === null ? [] : [r.cpuUsPerReq])) };
  });
}

/** The alloc and GC columns of a row from the probe's window (nulls without a probe). */
export function gcColumns(
  gc: GcReading | null,
  cpuSeconds: number | null,
  requests: number,
): Pick<RunRecord, 'allocBytesPerReq' | 'gcMsPer10k' | 'gcShareOfCpu' | 'gc'> {
  if (gc === null || requests === 0) return { allocBytesPerReq: null, gcMsPer10k: null, gcShareOfCpu: null, gc: null };
  const { type: _type, ...detail } = gc;
  const gcMs = gc.minor.ms + gc.major.ms + gc.other.ms;
  return {
    allocBytesPerReq: gc.allocatedBytes / requests,
    gcMsPer10k: (gcMs / requests) * 1e4,
    gcShareOfCpu: cpuSeconds ? gcMs / 1000 / cpuSeconds : null,
    gc: detail,
  };
}

interface RedisTotals {
  calls: number;
  evalsha: number;
  byCommand: Map<string, number>;
}

interface Snapshot extends RedisTotals {
  proxyCpu: number;
  doubleCpu: number;
}

async function redisTotals(stats: Redis): Promise<RedisTotals> {
  const byCommand = await commandCalls(stats);
  // The benchmark's own INFO calls are not the edge's.
  byCommand.delete('info');
  let calls = 0;
  for (const n of byCommand.values()) calls += n;
  return { calls, evalsha: byCommand.get('evalsha') ?? 0, byCommand };
}

function perCommand(before: Map<string, number>, after: Map<string, number>, requests: number): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [cmd, n] of after) {
    const d = n - (before.get(cmd) ?? 0);
    if (d > 0) out[cmd] = Math.round((1000 * d) / requests) / 1000;
  }
  return out;
}

async function snapshot(proxyPid: number | null, doublePid: number, stats: Redis | null): Promise<Snapshot> {
  const r = stats ? await redisTotals(stats) : { calls: 0, evalsha: 0, byCommand: new Map<string, number>() };
  return { ...r, proxyCpu: proxyPid === null ? 0 : treeCpuSeconds(proxyPid), doubleCpu: treeCpuSeconds(doublePid) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const opts = parseArgs(process.argv.slice(2));
  const render = parseCli({ args: process.argv.slice(2), options: { render: { type: 'string' } }, strict: false }).values.render;
  if (typeof render === 'string') {
    // Re-renders BENCHMARKS.md's block from a saved result (after a change of the report's layout).
    const saved = JSON.parse(await readFile(render, 'utf8')) as BenchReport;
    await updateBenchmarksMd(join(REPO_ROOT, 'BENCHMARKS.md'), renderMarkdown(saved, SCENARIO_LABELS));
  } else if (process.env.QE_BENCH_NOFILE === '1') await runBench(opts);
  else {
    // 10,000 client sockets need more descriptors than a login shell allows: run again with a raised limit.
    const child = spawnWithLimits([process.execPath, ...process.execArgv, process.argv[1], ...process.argv.slice(2)], {
      stdio: 'inherit',
      env: { ...process.env, QE_BENCH_NOFILE: '1' },
    });
    child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
  }
}
