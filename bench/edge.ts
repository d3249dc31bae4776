/**
 * queen-edge as the benchmark runs it: in its own process, from a tsc build of src/ like `npm
 * start` runs (tsx's transform wraps every closure in a `__name()` call, a per-request cost
 * production does not pay), or from source with tsx for quick runs; with bench/probe.ts
 * preloaded for event-loop readings and CPU profiles over IPC, its stdout (pino: warnings, access log) in a file.
 */
import type { ChildProcess } from 'node:child_process';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, openSync, realpathSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { GcReading, ProbeReading } from './probe.js';
import { sleep, spawnWithLimits, stopChild } from './procs.js';

/** The repository root (bench/..). */
export const REPO_ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));

/** The HS256 secret of every benchmark config. */
export const BENCH_SECRET = 'queen-edge-bench-secret-0123456789abcdef';
/** The Redis key prefix of every bench edge. */
export const BENCH_REDIS_PREFIX = 'qe-bench:';

/** The tenant every benchmark token names. */
export const BENCH_TENANT = 'bench';

/** The tenant of the throttled rows (reached through its own Host, so its token's claim matches). */
export const THROTTLED_TENANT = 'throttled';
export const THROTTLED_HOST = 'throttled.bench';

/** One request per second: after the first, the deny cache answers 429 before the body is read. */
const THROTTLED_PLAN = {
  features: [],
  limits: {
    requestsPerSec: 1,
    requestBurst: 1,
    messagesPerSec: 100_000_000,
    messageBurst: 100_000_000,
    parkedPolls: 100_000,
    maxPayloadBytes: 2_097_152,
    maxBatch: 1000,
  },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 1_099_511_627_776,
};

/** Limits no benchmark reaches: the limiter runs its whole decision and always admits. */
const UNREACHED_PLAN = {
  features: [],
  limits: {
    requestsPerSec: 10_000_000,
    requestBurst: 10_000_000,
    messagesPerSec: 100_000_000,
    messageBurst: 100_000_000,
    parkedPolls: 100_000,
    maxPayloadBytes: 1_048_576,
    maxBatch: 1000,
  },
  quotas: { messagesPerMonth: 1_000_000_000_000, ingressBytesPerMonth: 1_000_000_000_000_000 },
  storageBytes: 1_099_511_627_776,
};

/**
 * Where the benchmark's build of src/ goes: under node_modules, so packages resolve and git ignores
 * it. A worktree may share another checkout's node_modules by a symlink: a directory of its own per
 * checkout keeps one checkout's build from replacing another's. The real path, so a module's
 * `import.meta.url` equals the path it was started by (the floor's entry-point check).
 */
const BUILD_DIR = join(
  realpathSync(join(REPO_ROOT, 'node_modules')),
  '.cache',
  `queen-edge-bench-${createHash('sha256').update(REPO_ROOT).digest('hex').slice(0, 8)}`,
);

/** How the edge process is started: the command line before `--config`. */
export type EdgeEntry = readonly string[];

/**
 * Builds src/ with tsc (incremental) and the probe with TypeScript's transpiler, and returns the
 * command line; `fromSource` skips the build and runs src/cli.ts with tsx.
 */
export async function prepareEdgeEntry(fromSource: boolean): Promise<EdgeEntry> {
  if (fromSource) return [process.execPath, '--import', 'tsx', ...(await probeImport(true)), 'src/cli.ts'];
  const out = join(BUILD_DIR, 'dist');
  const tsc = spawnSync(
    process.execPath,
    [
      join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'),
      '-p',
      'tsconfig.build.json',
      '--outDir',
      out,
      '--sourceMap',
      'false',
      '--incremental',
      '--tsBuildInfoFile',
      join(BUILD_DIR, 'tsbuildinfo'),
    ],
    { cwd: REPO_ROOT, encoding: 'utf8' },
  );
  // Type errors still emit JavaScript; only a build that produced no entry point is fatal.
  if (!existsSync(join(out, 'cli.js'))) throw new Error(`tsc produced no dist/cli.js:\n${tsc.stdout}${tsc.stderr}`);
  return [process.execPath, ...(await probeImport(false)), join(out, 'cli.js')];
}

/** The `--import` arguments that preload bench/probe.ts: transpiled (no tsx), or from source. */
export async function probeImport(fromSource: boolean): Promise<string[]> {
  return ['--import', fromSource ? './bench/probe.ts' : await transpileBenchModule('probe')];
}

/** Transpiles bench/<name>.ts into the build directory; returns the .mjs file. */
async function transpileBenchModule(name: string): Promise<string> {
  const ts = (await import('typescript')).default;
  const js = ts.transpileModule(await readFile(join(REPO_ROOT, 'bench', `${name}.ts`), 'utf8'), {
    compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
  });
  await mkdir(BUILD_DIR, { recursive: true });
  const file = join(BUILD_DIR, `${name}.mjs`);
  await writeFile(file, js.outputText);
  return file;
}

/**
 * The command line of a stand-alone bench module (the floor forwarder): transpiled like the probe,
 * so it pays no tsx transform per request either; with `fromSource`, run by tsx. With `probe`,
 * bench/probe.ts is preloaded (the process must then be started with QE_BENCH_PROBE=1 and IPC).
 */
export async function prepareBenchModule(name: string, fromSource: boolean, probe = false): Promise<EdgeEntry> {
  const preload = probe ? await probeImport(fromSource) : [];
  if (fromSource) return [process.execPath, '--import', 'tsx', ...preload, `bench/${name}.ts`];
  return [process.execPath, ...preload, await transpileBenchModule(name)];
}

/** What a generated edge config turns on. */
export interface EdgeConfigInput {
  readonly port: number;
  readonly adminPort: number;
  readonly cert: string;
  readonly key: string;
  readonly brokerUrl: string;
  /** The throttled tenant's own broker (its few admitted requests are answered there); the discard port when absent. */
  readonly throttledBrokerUrl?: string;
  /** Redis limits (null: the in-memory limiter). */
  readonly redisUrl: string | null;
  readonly jwksUrl: string | null;
  readonly accessLog: boolean;
  readonly workers: number;
  readonly upstreamConnections: number;
  readonly maxLongPollMs: number;
  /** Extra top-level keys, e.g. a metering section when the schema has one. */
  readonly extra: Record<string, unknown>;
}

/** A queen-edge configuration document (written as JSON, which the YAML loader reads). */
export function edgeConfig(c: EdgeConfigInput): Record<string, unknown> {
  return {
    server: {
      https: { host: '127.0.0.1', port: c.port, cert: c.cert, key: c.key },
      http: { port: null },
      admin: { host: '127.0.0.1', port: c.adminPort },
      longPoll: { defaultTimeoutMs: 30_000, maxTimeoutMs: c.maxLongPollMs, slackMs: 5000 },
      workers: c.workers,
      drainTimeoutMs: 1000,
    },
    log: { level: c.accessLog ? 'info' : 'warn', accessLog: c.accessLog },
    redis: { url: c.redisUrl, keyPrefix: BENCH_REDIS_PREFIX, failMode: 'local' },
    auth: { secret: BENCH_SECRET, jwksUrl: c.jwksUrl, defaultTenant: null },
    upstream: { connections: c.upstreamConnections },
    plans: { unreached: UNREACHED_PLAN, throttled: THROTTLED_PLAN },
    // Each tenant on a broker of its own, as most deployments run: the bench tenant has the whole
    // pool. The throttled tenant's requests are nearly all refused before forwarding.
    tenants: {
      [BENCH_TENANT]: { plan: 'unreached', hosts: ['127.0.0.1', 'localhost'], brokers: [c.brokerUrl] },
      [THROTTLED_TENANT]: { plan: 'throttled', hosts: [THROTTLED_HOST], brokers: [c.throttledBrokerUrl ?? 'http://127.0.0.1:9'] },
    },
    ...c.extra,
  };
}

/** The parent's side of bench/probe.ts, over the IPC channel of a process it is preloaded into. */
export interface Probe {
  /** Event-loop delay since the last reset, and memory. */
  read(): Promise<ProbeReading>;
  resetLoopDelay(): void;
  /** Starts the V8 CPU profiler in the proxy (primary process). */
  startProfile(): Promise<void>;
  /** Stops it and writes the .cpuprofile to `file`. */
  stopProfile(file: string): Promise<void>;
  /** Opens a window of GC counts and allocated bytes (bench/probe.ts GcReading). */
  startGc(): Promise<void>;
  stopGc(): Promise<GcReading>;
  /** Starts V8's sampling heap profiler, objects collected by GC included. */
  startSampling(intervalBytes: number): Promise<void>;
  /** Stops it: the bytes its samples stand for (null when the profiler failed); with `file`, the profile is written there. */
  stopSampling(file?: string): Promise<number | null>;
}

/** Talks to the probe in `child`: each request is answered by one message of a known type, in order. */
export function probeClient(child: ChildProcess): Probe {
  const waiting = new Map<string, Array<(m: Record<string, unknown>) => void>>();
  child.on('message', (m: { type?: string }) => {
    if (typeof m?.type === 'string') waiting.get(m.type)?.shift()?.(m as Record<string, unknown>);
  });
  const ask = <T>(msg: Record<string, unknown>, answer: string): Promise<T> =>
    new Promise<T>((resolveAnswer) => {
      const queue = waiting.get(answer) ?? [];
      queue.push((m) => resolveAnswer(m as T));
      waiting.set(answer, queue);
      child.send(msg);
    });
  return {
    read: () => ask<ProbeReading>({ type: 'read' }, 'reading'),
    resetLoopDelay: () => child.send({ type: 'reset' }),
    startProfile: () => ask<void>({ type: 'profile-start' }, 'profiling'),
    stopProfile: (file) => ask<void>({ type: 'profile-stop', file }, 'profiled'),
    startGc: () => ask<void>({ type: 'gc-start' }, 'gc-started'),
    stopGc: () => ask<GcReading>({ type: 'gc-stop' }, 'gc'),
    startSampling: (intervalBytes) => ask<void>({ type: 'sample-start', intervalBytes }, 'sampling'),
    stopSampling: async (file) => (await ask<{ bytes: number | null }>({ type: 'sample-stop', file }, 'sampled')).bytes,
  };
}

/** A running edge process. */
export interface EdgeProcess extends Probe {
  readonly pid: number;
  /** Itself, so an edge is a `{ pid, probe }` for the bench's measure. */
  readonly probe: Probe;
  /** https://127.0.0.1:<port>, or http:// when the config has only the plain listener. */
  readonly base: string;
  readonly logFile: string;
  /** SIGTERM (drain), SIGKILL after a grace period. */
  stop(): Promise<void>;
}

/** Starts the edge with `config` and waits until /readyz answers 200. */
export async function startEdgeProcess(name: string, config: Record<string, unknown>, o: { dir: string; entry: EdgeEntry }): Promise<EdgeProcess> {
  const server = config.server as { https: { port: number | null }; http?: { port: number | null }; admin: { port: number } };
  const configFile = join(o.dir, `${name}.yaml`);
  await writeFile(configFile, JSON.stringify(config, null, 2));
  const logFile = join(o.dir, `${name}.log`);
  const out = openSync(logFile, 'a');
  const argv = [...o.entry, '--config', configFile];
  const child: ChildProcess = spawnWithLimits(argv, { stdio: ['ignore', out, 'inherit', 'ipc'], cwd: REPO_ROOT, env: { ...process.env, QE_BENCH_PROBE: '1' } });
  closeSync(out);
  const probe = probeClient(child);
  await waitReady(server.admin.port, child, 20_000);
  return {
    ...probe,
    probe,
    pid: child.pid!,
    base: server.https.port !== null ? `https://127.0.0.1:${server.https.port}` : `http://127.0.0.1:${server.http?.port}`,
    logFile,
    stop: () => stopChild(child, 10_000),
  };
}

async function waitReady(adminPort: number, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`queen-edge exited with ${child.exitCode} during start (see its log)`);
    const status = await new Promise<number>((res) => {
      const req = request({ host: '127.0.0.1', port: adminPort, path: '/readyz', timeout: 500 }, (r) => {
        r.resume();
        res(r.statusCode ?? 0);
      });
      req.on('error', () => res(0));
      req.on('timeout', () => req.destroy());
      req.end();
    });
    if (status === 200) return;
    if (Date.now() > deadline) throw new Error(`queen-edge not ready after ${timeoutMs} ms`);
    await sleep(100);
  }
}
