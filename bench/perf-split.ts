/**
 * Where the edge's CPU goes above the floor's, by kind of code: the floor forwarder (bench/floor.ts)
 * and this checkout's edge in plain forwarding (with --full, the full pipeline) loaded at the same
 * moment by identical clients while Linux `perf` samples both processes, every thread of each.
 * Each sample is put in one category (the kernel, the edge's own JavaScript, undici's, Node's, V8's
 * builtins and runtime, garbage collection, OpenSSL, …) and reported in µs per answered request,
 * floor beside edge, largest difference first, then the symbols that differ most. A V8 CPU profile
 * sees only JavaScript and names native time by its caller; this sees the kernel, the C++ and the
 * GC threads too. See BENCHMARKS.md, "Where the rest goes, by kind of code".
 *
 *   npx tsx bench/perf-split.ts [--workload push-64B|push-8KiB|pop] [--proto h1|h2] [--seconds 8] [--full] [--symbols 30]
 *
 * Needs `perf` (Debian's linux-perf) and leave to sample other processes (root, or
 * kernel.perf_event_paranoid ≤ 1 for kernel samples). Both processes run with --perf-basic-prof,
 * which names JIT-compiled functions for perf: its map files in /tmp are removed at the end.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startFastDouble } from './double.js';
import { BENCH_TENANT, prepareBenchModule, prepareEdgeEntry, startEdgeProcess } from './edge.js';
import { runH2Load } from './h2load.js';
import { runLoad, type Workload } from './load.js';
import { makeCertificate, stopChild } from './procs.js';
import { sideConfig, startReporting, token, workloads } from './run.js';
import { PrivateRedis } from '../test/helpers/redis.js';

/** One perf sample's symbol, as `perf report` prints it. */
export interface Sample {
  readonly main: boolean;
  readonly dso: string;
  readonly symbol: string;
  readonly kernel: boolean;
}

/** The category of a sample: what kind of code was running. Pure, so it is tested (test/bench/perf-split.test.ts). */
export function categoryOf(s: Sample): string {
  if (!s.main) return /Concurrent|Scaveng|Sweep|Mark|Evacuat|Heap/.test(s.symbol) ? 'gc (helper threads)' : 'other threads';
  if (s.kernel) return 'kernel';
  const sym = s.symbol;
  if (sym.startsWith('JS:')) {
    if (sym.includes('wasm')) return 'js: llhttp (wasm, undici)';
    if (sym.includes('/node_modules/undici/')) return 'js: undici';
    if (sym.includes('node:')) return 'js: node';
    // A bench build of the edge (or the floor) lives under node_modules/.cache (bench/edge.ts).
    if (sym.includes('/node_modules/') && !sym.includes('/node_modules/.cache/')) return 'js: other packages';
    return 'js: edge (or floor)';
  }
  if (sym.startsWith('RegExp:')) return 'regexp';
  if (sym.startsWith('Builtins_')) return 'v8: builtins';
  if (/Scaveng|Heap|GC|Mark|Sweep|Evacuat/.test(sym)) return 'gc (main thread)';
  if (sym.startsWith('v8::') || sym.includes('Runtime_')) return 'v8: runtime';
  if (sym.startsWith('node::') || /^uv_|^uv__/.test(sym)) return 'node c++ and libuv';
  if (/llhttp/.test(sym)) return 'llhttp (node c++)';
  if (/aes|gcm|sha|ssl|SSL|EVP_|BN_|OPENSSL|CRYPTO|tls1/.test(sym)) return 'openssl';
  if (s.dso.startsWith('libc') || /malloc|free|memmove|memcpy|memset/.test(sym)) return 'libc';
  return `other (${s.dso})`;
}

/** perf report's lines `period tid:comm dso [.|k] symbol`: the period summed by category and by symbol, per process. */
export function tally(report: string, threadsOf: ReadonlyMap<number, number>): Map<number, { byCategory: Map<string, number>; bySymbol: Map<string, number> }> {
  const out = new Map<number, { byCategory: Map<string, number>; bySymbol: Map<string, number> }>();
  const line = /^\s*(\d+)\s+(\d+):\S*\s+(.+?)\s+\[([.k])\]\s+(.*)$/;
  for (const text of report.split('\n')) {
    const m = line.exec(text);
    if (m === null) continue;
    const tid = Number(m[2]);
    const pid = threadsOf.get(tid);
    if (pid === undefined) continue;
    const sample: Sample = { main: tid === pid, dso: m[3]!, symbol: m[5]!.trim(), kernel: m[4] === 'k' };
    const category = categoryOf(sample);
    const period = Number(m[1]);
    const t = out.get(pid) ?? { byCategory: new Map<string, number>(), bySymbol: new Map<string, number>() };
    out.set(pid, t);
    t.byCategory.set(category, (t.byCategory.get(category) ?? 0) + period);
    const key = `${category}\t${sample.symbol}`;
    t.bySymbol.set(key, (t.bySymbol.get(key) ?? 0) + period);
  }
  return out;
}

/** Every thread id of `pid` (read while it runs: perf names threads, not processes). */
function threads(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).map(Number);
}

async function main(): Promise<void> {
  const { values: v } = parseArgs({
    options: {
      workload: { type: 'string', default: 'push-64B' },
      proto: { type: 'string', default: 'h1' },
      seconds: { type: 'string', default: '8' },
      full: { type: 'boolean', default: false },
      symbols: { type: 'string', default: '30' },
    },
  });
  if (spawnSync('perf', ['--version']).status !== 0) throw new Error('bench/perf-split.ts needs Linux perf (Debian: apt-get install linux-perf)');
  const w: Workload | undefined = workloads().find((x) => x.name === v.workload);
  const names = workloads().map((x) => x.name);
  if (w === undefined) throw new Error(`--workload is one of ${names.join(', ')}`);
  const seconds = Math.max(2, Number(v.seconds));
  const dir = mkdtempSync(join(tmpdir(), 'queen-edge-perf-split-'));
  const { cert, key } = await makeCertificate(dir);
  const double = await startFastDouble(0);
  const brokerUrl = `http://127.0.0.1:${double.port}`;
  const jwt = await token({ roles: ['read-write'], tenant: BENCH_TENANT });
  const headers = { authorization: `Bearer ${jwt}` };
  const redis = v.full ? await PrivateRedis.start() : null;
  // The code map perf reads (/tmp/perf-<pid>.map), and V8's own log (which the flag turns on) kept out of the checkout.
  const withPerfMap = (entry: readonly string[], name: string) => [
    entry[0]!,
    '--perf-basic-prof',
    `--logfile=${join(dir, `${name}-v8.log`)}`,
    '--no-logfile-per-isolate',
    ...entry.slice(1),
  ];
  const edge = await startEdgeProcess('edge', await sideConfig({ cert, key, brokerUrl, redisUrl: redis?.url ?? null, full: v.full }), {
    dir,
    entry: withPerfMap(await prepareEdgeEntry(false), 'edge'),
  });
  const floor = await startReporting(
    [...withPerfMap(await prepareBenchModule('floor', false), 'floor'), cert, key, brokerUrl, v.proto === 'h2' ? 'h2' : 'h1'],
    'floor forwarder',
  );
  const floorBase = `https://127.0.0.1:${floor.port}`;
  const load = (base: string, s: number) =>
    v.proto === 'h2' ? runH2Load(base, w, { clients: 2, streams: 100, seconds: s, headers }) : runLoad(base, w, { connections: 50, seconds: s, headers });
  let perf: ChildProcess | null = null;
  const data = join(dir, 'perf.data');
  try {
    await Promise.all([load(floorBase, 3), load(edge.base, 3)]);
    const floorPid = floor.child.pid!;
    perf = spawn('perf', ['record', '-F', '999', '-o', data, '-p', `${floorPid},${edge.pid}`], { stdio: ['ignore', 'ignore', 'pipe'] });
    // perf attaches within a few ms; its first write is the signal it did.
    await new Promise((r) => setTimeout(r, 300));
    const [rf, re] = await Promise.all([load(floorBase, seconds), load(edge.base, seconds)]);
    const threadsOf = new Map<number, number>();
    for (const pid of [floorPid, edge.pid]) for (const tid of threads(pid)) threadsOf.set(tid, pid);
    const stopped = new Promise((r) => perf!.once('close', r));
    perf.kill('SIGINT');
    await stopped;
    perf = null;
    const report = spawnSync(
      'perf',
      ['report', '-i', data, '--stdio', '--no-children', '--sort', 'pid,dso,sym', '--percent-limit', '0', '-F', 'period,pid,dso,sym'],
      { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 },
    ).stdout;
    const t = tally(report, threadsOf);
    // perf's period is in ns of CPU clock: µs per answered request.
    const per = (pid: number, requests: number, m: 'byCategory' | 'bySymbol', k: string) => (t.get(pid)?.[m].get(k) ?? 0) / 1000 / requests;
    const f = (k: string, m: 'byCategory' | 'bySymbol' = 'byCategory') => per(floorPid, rf.requests, m, k);
    const e = (k: string, m: 'byCategory' | 'bySymbol' = 'byCategory') => per(edge.pid, re.requests, m, k);
    const keys = (m: 'byCategory' | 'bySymbol') => [...new Set([...(t.get(floorPid)?.[m].keys() ?? []), ...(t.get(edge.pid)?.[m].keys() ?? [])])];
    console.log(
      `${w.name}, ${v.proto}, ${v.full ? 'full pipeline' : 'plain forwarding'}: floor ${rf.requests} requests, edge ${re.requests}, in ${seconds} s at the same moment`,
    );
    console.log(`${'µs per request'.padEnd(28)} ${'floor'.padStart(7)} ${'edge'.padStart(7)} ${'edge−floor'.padStart(10)}`);
    let tf = 0;
    let te = 0;
    for (const k of keys('byCategory').sort((a, b) => e(b) - f(b) - (e(a) - f(a)))) {
      tf += f(k);
      te += e(k);
      console.log(`${k.padEnd(28)} ${f(k).toFixed(2).padStart(7)} ${e(k).toFixed(2).padStart(7)} ${(e(k) - f(k)).toFixed(2).padStart(10)}`);
    }
    console.log(
      `${'total'.padEnd(28)} ${tf.toFixed(2).padStart(7)} ${te.toFixed(2).padStart(7)} ${(te - tf).toFixed(2).padStart(10)}   edge/floor ${(te / tf).toFixed(3)}`,
    );
    console.log(`\nsymbols that differ most (µs per request: edge−floor, floor, edge):`);
    for (const k of keys('bySymbol')
      .sort((a, b) => e(b, 'bySymbol') - f(b, 'bySymbol') - (e(a, 'bySymbol') - f(a, 'bySymbol')))
      .slice(0, Number(v.symbols))) {
      const [category, symbol] = k.split('\t') as [string, string];
      console.log(
        `${(e(k, 'bySymbol') - f(k, 'bySymbol')).toFixed(3).padStart(7)} ${f(k, 'bySymbol').toFixed(3).padStart(6)} ${e(k, 'bySymbol').toFixed(3).padStart(6)}  ${category.padEnd(22)} ${symbol.slice(0, 100)}`,
      );
    }
  } finally {
    perf?.kill('SIGINT');
    const pids = [floor.child.pid, edge.pid];
    await Promise.all([edge.stop(), stopChild(floor.child)]);
    await redis?.kill();
    await double.close();
    rmSync(dir, { recursive: true, force: true });
    for (const pid of pids) rmSync(`/tmp/perf-${pid}.map`, { force: true });
  }
}

if (process.argv[1]?.endsWith('perf-split.ts')) await main();
