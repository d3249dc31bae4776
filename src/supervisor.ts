/**
 * The process model (docs/deploying.md): one process serving everything, or a node:cluster primary that
 * forks workers sharing the listening ports (the primary accepts and hands connections out
 * round-robin). Owns the drain on SIGTERM/SIGINT and the replacement of workers that die. Nothing
 * here exits the process: each entry point resolves with the exit code and cli.ts exits.
 */
import cluster, { type Worker } from 'node:cluster';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { setImmediate as turn } from 'node:timers/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { RawConfig } from './config/schema.js';
import { ConfigJoin, splitConfig, type HeadPart, type TenantMap, type TenantsPart } from './config/parts.js';
import { startApp, type App } from './app.js';
import { compileTablesResolved } from './tables.js';
import { ConfigError } from './config/load.js';
import { runningConfig } from './config/reload-plan.js';
import type { HeldHangups } from './hangups.js';
import { checkFiles } from './preflight.js';
import { CertificateSet } from './listen/tls.js';
import { processLogger, type Logger } from './observability/log.js';

/** Primary → worker. The `queen-edge:` prefix keeps them apart from prom-client's own cluster messages. */
type ToWorker =
  /** A configuration in parts (config/parts.ts): the head, its tenants in chunks, the end. `start` is the worker's first. */
  | { type: 'queen-edge:config-head'; purpose: ConfigPurpose; head: HeadPart; reload?: number }
  | { type: 'queen-edge:config-tenants'; part: TenantsPart }
  | { type: 'queen-edge:config-end' }
  /** The primary refused the file: the workers record it, so their admin API and /metrics show it. */
  | { type: 'queen-edge:reload-refused'; problems: string[] }
  | { type: 'queen-edge:drain' }
  | { type: 'queen-edge:metrics'; id: number; text?: string; error?: string }
  /** The primary collects every worker's metrics for an aggregate. */
  | { type: 'queen-edge:collect'; id: number };
/** Worker → primary. */
type ToPrimary =
  | { type: 'queen-edge:hello' }
  | { type: 'queen-edge:listening' }
  | { type: 'queen-edge:metrics'; id: number }
  /** A worker's metrics for collection `id`: empty while it is still starting (nothing counted yet). */
  | { type: 'queen-edge:collected'; id: number; metrics: WorkerMetrics }
  /** Reload number `reload` was applied, or refused (the worker keeps what it runs). */
  | { type: 'queen-edge:reloaded'; reload: number; applied: boolean };

type WorkerMetrics = MetricObjectWithValues<MetricValue<string>>[];
type ConfigPurpose = 'start' | 'reload';

const SIGNALS = ['SIGTERM', 'SIGINT'] as const;
/** Time the primary waits for every worker's metrics. */
const COLLECT_TIMEOUT_MS = 5000;
/** Time a worker's /metrics waits for the primary's aggregate (a little over the primary's own wait). */
const METRICS_TIMEOUT_MS = 6000;
/** Beyond drainTimeoutMs, how long the primary waits for workers to finish closing before killing them. */
const DRAIN_BACKSTOP_MS = 10_000;

/** Number of processes that serve traffic: `server.workers`, where 0 means one per CPU with Redis and one without (in-memory limits and tenants are per process). */
export function workerCount(config: RawConfig, cpus: number): number {
  if (config.server.workers > 0) return config.server.workers;
  return sharedState(config) ? Math.max(1, cpus) : 1;
}

/** True when limits, tenants and usage live in Redis (one server or a Cluster), not in each process. */
function sharedState(config: RawConfig): boolean {
  return config.redis.url !== null || config.redis.cluster.length > 0;
}

/**
 * How many instances the deployment runs side by side (`QUEEN_EDGE_REPLICAS`, set by the Helm
 * chart) when that is more than one and there is no Redis to share limits, quotas and usage;
 * null otherwise. The schema refuses several workers without Redis, but only the deployment knows
 * about other pods.
 */
export function replicasWithoutRedis(config: RawConfig, env: NodeJS.ProcessEnv): number | null {
  const replicas = Number(env.QUEEN_EDGE_REPLICAS);
  return Number.isInteger(replicas) && replicas > 1 && !sharedState(config) ? replicas : null;
}

/** How dead workers are replaced. */
export interface RestartPolicy {
  /** A worker that ran at least this long died of something rare: it is replaced at once and its slot's crash streak resets. */
  minUptimeMs: number;
  /** Delay before replacing the first quick death; doubles with each further one in a row. */
  firstDelayMs: number;
  maxDelayMs: number;
}

/** Replacement backoff: 200 ms doubling to 30 s while workers die within 10 s of their start. */
export const DEFAULT_RESTART_POLICY: RestartPolicy = { minUptimeMs: 10_000, firstDelayMs: 200, maxDelayMs: 30_000 };

/** After a worker died having run `uptimeMs`: its slot's new crash streak and the wait before forking the replacement. */
export function nextRestart(streak: number, uptimeMs: number, policy: RestartPolicy = DEFAULT_RESTART_POLICY): { streak: number; delayMs: number } {
  if (uptimeMs >= policy.minUptimeMs) return { streak: 0, delayMs: 0 };
  const next = streak + 1;
  return { streak: next, delayMs: Math.min(policy.maxDelayMs, policy.firstDelayMs * 2 ** (next - 1)) };
}

/** One app's shutdown: the first request drains it, a second signal gives up on the drain. */
interface Shutdown {
  /** Resolves with the exit code: 0 after a clean drain, 1 after a failed one or a second signal. */
  readonly done: Promise<number>;
  /** A signal: drains the first time, ends at once the second. */
  signal(name: string): void;
  /** Drains unless already draining (the primary's request, which must not count as a second signal). */
  drain(reason: string): void;
}

function shutdownOf(app: App, log: Logger): Shutdown {
  let draining = false;
  let finish!: (code: number) => void;
  const done = new Promise<number>((resolveDone) => {
    finish = resolveDone;
  });
  const drain = (reason: string): void => {
    if (draining) return;
    draining = true;
    log.info({ reason }, 'draining');
    app.close().then(
      () => {
        log.info('drained');
        finish(0);
      },
      (err: unknown) => {
        log.error({ err }, 'error while draining');
        finish(1);
      },
    );
  };
  return {
    done,
    drain,
    signal(name) {
      if (!draining) return drain(name);
      log.warn({ signal: name }, 'second signal: exiting without finishing the drain');
      finish(1);
    },
  };
}

/** Reads the configuration file again (what SIGHUP applies); rejects with a ConfigError when it is invalid. */
export type ConfigSource = () => Promise<RawConfig>;

/** Logs why a reload was refused: every problem, as at start; the running configuration stays. Returns the problems. */
function reloadRefused(log: Logger, err: unknown): string[] {
  if (err instanceof ConfigError) {
    log.error({ problems: err.problems }, 'configuration reload refused: keeping the running configuration');
    return err.problems;
  }
  log.error({ err }, 'configuration reload failed: keeping the running configuration');
  return [String((err as Error)?.message ?? err)];
}

/** Routes SIGTERM/SIGINT to `onSignal` until the returned function is called. */
function onSignals(onSignal: (name: string) => void): () => void {
  const handlers = SIGNALS.map((name) => [name, () => onSignal(name)] as const);
  for (const [name, h] of handlers) process.on(name, h);
  return () => {
    for (const [name, h] of handlers) process.off(name, h);
  };
}

/**
 * Runs jobs one after another in the order they are given, whatever each one's outcome: reloads
 * and refusals are read, applied and recorded in the order of the signals, so a slow check of one
 * file cannot let an older file win over a newer one, nor a refusal be recorded before the reload
 * it followed.
 */
export function inTurn(): (job: () => Promise<unknown> | unknown) => Promise<void> {
  let last: Promise<unknown> = Promise.resolve();
  return (job) => {
    const run = last.then(job).then(
      () => {},
      () => {},
    );
    last = run;
    return run;
  };
}

/** Hands held hangups over to `onHup` (logging one that came during the start); without `onHup` they stay held. */
function takeHangups(hangups: HeldHangups, log: Logger, onHup: (() => void) | null): () => void {
  if (onHup === null) return () => {};
  if (hangups.pending) log.info('SIGHUP received while starting: reloading now');
  return hangups.handOver(onHup);
}

/** `server.workers: 1`: serves in this process until a signal (SIGHUP reloads from `reread`); resolves with the exit code. */
export async function runInProcess(config: RawConfig, deps: { log: Logger; hangups: HeldHangups; reread?: ConfigSource }): Promise<number> {
  const app = await startApp(config, { log: deps.log });
  const shutdown = shutdownOf(app, deps.log);
  const release = onSignals((name) => shutdown.signal(name));
  const reread = deps.reread;
  const next = inTurn();
  const releaseHup = takeHangups(
    deps.hangups,
    deps.log,
    reread
      ? () =>
          void next(() =>
            reread()
              .then(checkedFiles)
              .then(
                // app.reload records its own refusals.
                (config) => app.reload(config).catch((err: unknown) => void reloadRefused(deps.log, err)),
                (err: unknown) => app.reloads.refused(reloadRefused(deps.log, err)),
              ),
          )
      : null,
  );
  const code = await shutdown.done;
  release();
  releaseHup();
  return code;
}

/**
 * The certificate files and keys a configuration names, read and parsed as the start reads them
 * (src/preflight.ts): a reload whose files would fail is refused whole, before any process tries it.
 */
async function checkedFiles(config: RawConfig): Promise<RawConfig> {
  const { problems } = await checkFiles(config);
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/**
 * With no certificate configured, generates the self-signed pair once, in the primary, and points
 * the workers' config at it: otherwise each worker would serve its own and a client's TLS session
 * would meet a different certificate per connection. Generated at the first configuration that
 * needs it (the start's, or a reload's that drops the certificate files), then reused.
 */
function selfSignedSharing(log: Logger): { share(config: RawConfig): Promise<RawConfig>; cleanup(): Promise<void> } {
  let paths: Promise<{ dir: string; cert: string; key: string }> | null = null;
  const generate = async (https: RawConfig['server']['https']) => {
    const generated = await CertificateSet.load({ ...https, sni: [], clientCa: null }, { log });
    const { cert, key } = generated.contextOptions();
    generated.close();
    const dir = await mkdtemp(join(tmpdir(), 'queen-edge-tls-'));
    const files = { dir, cert: join(dir, 'cert.pem'), key: join(dir, 'key.pem') };
    await writeFile(files.cert, cert as Buffer, { mode: 0o644 });
    await writeFile(files.key, key as Buffer, { mode: 0o600 });
    return files;
  };
  return {
    async share(config) {
      const https = config.server.https;
      if (https.port === null || https.cert !== null) return config;
      paths ??= generate(https);
      const { cert, key } = await paths;
      return { ...config, server: { ...config.server, https: { ...https, cert, key } } };
    },
    async cleanup() {
      if (paths !== null) await rm((await paths).dir, { recursive: true, force: true });
    },
  };
}

interface WorkerState {
  slot: number;
  forkedAt: number;
  ready: boolean;
}

/**
 * The cluster primary: forks `count` workers, hands each the validated config, replaces those that
 * die (with backoff), answers their /metrics with prom-client's aggregate over all workers, and on
 * a signal drains them all. Resolves with the exit code once every worker has exited.
 */
export async function runPrimary(
  config: RawConfig,
  count: number,
  deps: { log: Logger; hangups: HeldHangups; clock?: () => number; policy?: RestartPolicy; reread?: ConfigSource },
): Promise<number> {
  const { log } = deps;
  const clock = deps.clock ?? Date.now;
  const policy = deps.policy ?? DEFAULT_RESTART_POLICY;
  const selfSigned = selfSignedSharing(log);
  const startConfig = await selfSigned.share(config);
  // What a worker (first or replacement) is handed: what the running workers run (config/reload-plan.ts).
  let workerConfig = startConfig;
  // The last reload sent, and what ran before it: a worker's refusal (Redis refusing the new
  // credentials, a certificate it cannot load) puts that back, unless another worker applied it,
  // so a replacement worker does not start with a configuration every worker refused.
  let lastReload: { seq: number; next: RawConfig; before: RawConfig; applied: boolean } | null = null;
  const workers = new Map<Worker, WorkerState>();
  const streaks = new Array<number>(count).fill(0);
  const restarts = new Set<NodeJS.Timeout>();
  const collector = metricsCollector();
  let started = false;
  let stopping = false;
  let failed = false;
  let backstop: NodeJS.Timeout | null = null;
  let finish!: (code: number) => void;
  const done = new Promise<number>((resolveDone) => {
    finish = resolveDone;
  });

  const fork = (slot: number): void => {
    workers.set(cluster.fork(), { slot, forkedAt: clock(), ready: false });
  };
  const send = (w: Worker, msg: ToWorker): void => {
    if (w.isConnected()) w.send(msg);
  };
  // Per worker, what is sent about configurations goes in order: a worker that says hello while a
  // reload is being sent must not get the two configurations' parts interleaved, nor a refusal
  // before the parts of the reload sent before it.
  const queues = new WeakMap<Worker, ReturnType<typeof inTurn>>();
  const inOrder = (w: Worker, job: () => Promise<void> | void): void => {
    let queue = queues.get(w);
    if (queue === undefined) {
      queue = inTurn();
      queues.set(w, queue);
    }
    void queue(job);
  };
  // The tenant map each worker was last sent: a file read against it is sent as its changes.
  const held = new WeakMap<Worker, TenantMap>();
  const sendConfig = (w: Worker, purpose: ConfigPurpose, config: RawConfig, reload?: number): void =>
    inOrder(w, async () => {
      const { head, parts } = splitConfig(config, held.get(w) ?? null);
      held.set(w, config.tenants);
      send(w, { type: 'queen-edge:config-head', purpose, head, reload });
      // A turn between parts: the primary hands out new connections and must not stall either.
      for (const part of parts) {
        send(w, { type: 'queen-edge:config-tenants', part });
        await turn();
      }
      send(w, { type: 'queen-edge:config-end' });
    });
  const end = (): void => {
    if (workers.size === 0 && restarts.size === 0) finish(failed ? 1 : 0);
  };
  const stop = (reason: string): void => {
    if (stopping) {
      log.warn({ reason }, 'second signal: killing workers without finishing the drain');
      for (const w of workers.keys()) w.process.kill('SIGKILL');
      finish(1);
      return;
    }
    stopping = true;
    log.info({ reason, workers: workers.size }, 'draining workers');
    for (const t of restarts) clearTimeout(t);
    restarts.clear();
    for (const w of workers.keys()) send(w, { type: 'queen-edge:drain' });
    backstop = setTimeout(() => {
      log.error({ workers: workers.size }, 'workers still running after the drain timeout: killing them');
      failed = true;
      for (const w of workers.keys()) w.process.kill('SIGKILL');
    }, config.server.drainTimeoutMs + DRAIN_BACKSTOP_MS);
    end();
  };

  const onMessage = (w: Worker, msg: ToPrimary): void => {
    const state = workers.get(w);
    if (state === undefined || typeof msg !== 'object' || msg === null) return;
    if (msg.type === 'queen-edge:hello') sendConfig(w, 'start', workerConfig);
    else if (msg.type === 'queen-edge:listening') {
      state.ready = true;
      log.info({ worker: w.id, workerPid: w.process.pid }, 'worker listening');
      // A replacement that finished starting after the signal drains at once.
      if (stopping) send(w, { type: 'queen-edge:drain' });
      else if (!started && [...workers.values()].filter((s) => s.ready).length === count) {
        started = true;
        log.info({ workers: count }, 'all workers listening');
      }
    } else if (msg.type === 'queen-edge:metrics') {
      collector.collect([...workers.keys()], send).then(
        (text) => send(w, { type: 'queen-edge:metrics', id: msg.id, text }),
        (err: Error) => send(w, { type: 'queen-edge:metrics', id: msg.id, error: err.message }),
      );
    } else if (msg.type === 'queen-edge:collected') collector.answer(w, msg.id, msg.metrics);
    else if (msg.type === 'queen-edge:reloaded' && lastReload !== null && msg.reload === lastReload.seq) {
      if (msg.applied) lastReload.applied = true;
      workerConfig = lastReload.applied ? lastReload.next : lastReload.before;
    }
  };

  const onExit = (w: Worker, code: number | null, signal: string | null): void => {
    const state = workers.get(w);
    if (state === undefined) return;
    workers.delete(w);
    collector.gone(w);
    const fields = { worker: w.id, workerPid: w.process.pid, code, signal };
    if (stopping) {
      if (code !== 0 && state.ready) failed = true;
      log.info(fields, 'worker exited');
      end();
      return;
    }
    if (!started) {
      // A worker that cannot start at all (port taken, Redis unreachable) would fail the same way again: give up like a single process would.
      log.error(fields, 'worker failed to start: stopping');
      failed = true;
      stop('startup failure');
      return;
    }
    const next = nextRestart(streaks[state.slot]!, clock() - state.forkedAt, policy);
    streaks[state.slot] = next.streak;
    log.warn({ ...fields, restartInMs: next.delayMs }, 'worker died: replacing it');
    const t = setTimeout(() => {
      restarts.delete(t);
      fork(state.slot);
    }, next.delayMs);
    restarts.add(t);
  };

  /**
   * Validated here, once (tables, certificate and key files), so an invalid file is logged once;
   * then every worker applies it and reports, as one process would, what applied and what needs a
   * restart.
   */
  const reload = async (): Promise<void> => {
    const next = await selfSigned.share(await checkedFiles(await deps.reread!()));
    await compileTablesResolved(next);
    const running = runningConfig(startConfig, next);
    lastReload = { seq: (lastReload?.seq ?? 0) + 1, next: running, before: workerConfig, applied: false };
    workerConfig = running;
    for (const w of workers.keys()) sendConfig(w, 'reload', next, lastReload.seq);
    log.info({ workers: workers.size }, 'configuration reload sent to the workers');
  };

  cluster.on('message', onMessage);
  cluster.on('exit', onExit);
  const release = onSignals(stop);
  const refused = (err: unknown): void => {
    const problems = reloadRefused(log, err);
    for (const w of workers.keys()) inOrder(w, () => send(w, { type: 'queen-edge:reload-refused', problems }));
  };
  const reloads = inTurn();
  const releaseHup = takeHangups(deps.hangups, log, deps.reread ? () => void reloads(() => reload().catch(refused)) : null);
  for (let slot = 0; slot < count; slot++) fork(slot);
  const code = await done;
  release();
  releaseHup();
  cluster.off('message', onMessage);
  cluster.off('exit', onExit);
  if (backstop !== null) clearTimeout(backstop);
  await selfSigned.cleanup();
  return code;
}

/**
 * The primary's side of /metrics: asks every worker for its metrics and aggregates them with
 * prom-client's rules (sum, or each family's own aggregator). A worker still starting answers at
 * once with nothing, so the first scrape after a start does not wait for it (prom-client's own
 * clusterMetrics() waits for every worker, and timed out on one that had not set up its side).
 */
function metricsCollector(): {
  collect(workers: Worker[], send: (w: Worker, msg: ToWorker) => void): Promise<string>;
  answer(w: Worker, id: number, metrics: WorkerMetrics): void;
  gone(w: Worker): void;
} {
  interface Collection {
    readonly waiting: Set<Worker>;
    readonly answers: WorkerMetrics[];
    readonly done: (err: Error | null) => void;
  }
  const collections = new Map<number, Collection>();
  let next = 0;
  const settleIfComplete = (id: number, c: Collection): void => {
    if (c.waiting.size > 0) return;
    collections.delete(id);
    c.done(null);
  };
  return {
    collect(targets, send) {
      const id = next++;
      return new Promise<string>((resolveText, rejectText) => {
        const waiting = new Set(targets.filter((w) => w.isConnected()));
        const answers: WorkerMetrics[] = [];
        const timer = setTimeout(() => {
          collections.delete(id);
          rejectText(new Error(`${waiting.size} worker(s) did not send their metrics within ${COLLECT_TIMEOUT_MS} ms`));
        }, COLLECT_TIMEOUT_MS);
        const done = (err: Error | null): void => {
          clearTimeout(timer);
          if (err) {
            rejectText(err);
            return;
          }
          Promise.resolve(AggregatorRegistry.aggregate(answers).metrics()).then(resolveText, rejectText);
        };
        const c = { waiting, answers, done };
        collections.set(id, c);
        for (const w of waiting) send(w, { type: 'queen-edge:collect', id });
        settleIfComplete(id, c);
      });
    },
    answer(w, id, metrics) {
      const c = collections.get(id);
      if (c === undefined || !c.waiting.delete(w)) return;
      if (metrics.length > 0) c.answers.push(metrics);
      settleIfComplete(id, c);
    },
    gone(w) {
      // A worker that died is not waited for: its counts died with it.
      for (const [id, c] of collections) if (c.waiting.delete(w)) settleIfComplete(id, c);
    },
  };
}

/** Asks the primary for the cluster-wide /metrics text, which only the primary can aggregate. */
function metricsFromPrimary(): { ask(): Promise<string>; onAnswer(msg: Extract<ToWorker, { type: 'queen-edge:metrics' }>): void } {
  const pending = new Map<number, { resolve(text: string): void; reject(err: Error): void; timer: NodeJS.Timeout }>();
  let next = 0;
  return {
    ask() {
      const id = next++;
      return new Promise<string>((resolveAsk, rejectAsk) => {
        const timer = setTimeout(() => {
          pending.delete(id);
          rejectAsk(new Error('the cluster primary did not answer the metrics request'));
        }, METRICS_TIMEOUT_MS);
        pending.set(id, { resolve: resolveAsk, reject: rejectAsk, timer });
        process.send!({ type: 'queen-edge:metrics', id } satisfies ToPrimary);
      });
    },
    onAnswer(msg) {
      const p = pending.get(msg.id);
      if (p === undefined) return;
      pending.delete(msg.id);
      clearTimeout(p.timer);
      if (msg.text !== undefined) p.resolve(msg.text);
      else p.reject(new Error(msg.error ?? 'metrics aggregation failed'));
    },
  };
}

/**
 * A cluster worker: takes its config from the primary, serves until told to drain (or signalled),
 * resolves with the exit code. SIGHUP stays held (the CLI's HeldHangups): a terminal's hangup
 * reaches the whole group, and the primary reloads the workers itself.
 */
export async function runWorker(): Promise<number> {
  const metrics = metricsFromPrimary();
  let drainEarly = false;
  // A reload sent while this worker was still starting: applied once it runs.
  let reloadEarly: { config: RawConfig; reload: number | undefined } | null = null;
  let shutdown: Shutdown | null = null;
  let reloadWorker: ((config: RawConfig, reload: number | undefined) => void) | null = null;
  let refusedWorker: ((problems: string[]) => void) | null = null;
  // Until the app runs, this worker has counted nothing: it answers a collection with no metrics.
  let registry: App['metrics'] | null = null;
  const collected = (id: number): void => {
    const answer = (metrics: WorkerMetrics): void => void process.send!({ type: 'queen-edge:collected', id, metrics } satisfies ToPrimary);
    if (registry === null) answer([]);
    else registry.getMetricsAsJSON().then(answer, () => answer([]));
  };
  // The configuration whose parts are arriving.
  let incoming: { purpose: ConfigPurpose; join: ConfigJoin; reload: number | undefined } | null = null;
  // The tenant map last received: the primary sends a file read against it as its changes.
  let held: TenantMap | null = null;
  const configured = new Promise<RawConfig>((resolveConfig) => {
    const received = (purpose: ConfigPurpose, config: RawConfig, reload: number | undefined): void => {
      if (purpose === 'start') resolveConfig(config);
      else if (reloadWorker === null) reloadEarly = { config, reload };
      else reloadWorker(config, reload);
    };
    process.on('message', (msg: ToWorker) => {
      if (typeof msg !== 'object' || msg === null) return;
      if (msg.type === 'queen-edge:config-head') incoming = { purpose: msg.purpose, join: new ConfigJoin(msg.head, held), reload: msg.reload };
      else if (msg.type === 'queen-edge:config-tenants') incoming?.join.add(msg.part);
      else if (msg.type === 'queen-edge:config-end') {
        if (incoming !== null) {
          const config = incoming.join.config();
          held = config.tenants;
          received(incoming.purpose, config, incoming.reload);
        }
        incoming = null;
      } else if (msg.type === 'queen-edge:metrics') metrics.onAnswer(msg);
      else if (msg.type === 'queen-edge:collect') collected(msg.id);
      else if (msg.type === 'queen-edge:reload-refused') refusedWorker?.(msg.problems);
      else if (msg.type === 'queen-edge:drain') {
        if (shutdown === null) drainEarly = true;
        else shutdown.drain('primary');
      }
    });
  });
  process.send!({ type: 'queen-edge:hello' } satisfies ToPrimary);
  const config = await configured;
  const log = processLogger(config.log).child({ worker: cluster.worker!.id });
  const app = await startApp(config, { log, metricsText: () => metrics.ask() });
  registry = app.metrics;
  const current = shutdownOf(app, log);
  shutdown = current;
  // app.reload records its own refusals.
  // A refusal is recorded after the reload sent before it has been applied or refused.
  const reloads = inTurn();
  const reported = (reload: number | undefined, applied: boolean): void => {
    if (reload !== undefined) process.send!({ type: 'queen-edge:reloaded', reload, applied } satisfies ToPrimary);
  };
  reloadWorker = (next, reload) =>
    void reloads(() =>
      app.reload(next).then(
        () => reported(reload, true),
        (err: unknown) => {
          reloadRefused(log, err);
          reported(reload, false);
        },
      ),
    );
  refusedWorker = (problems) => void reloads(() => app.reloads.refused(problems));
  // Set by the message handler: TypeScript cannot see that assignment here.
  const early = reloadEarly as { config: RawConfig; reload: number | undefined } | null;
  if (early !== null) reloadWorker(early.config, early.reload);
  // Ctrl-C reaches every process of the group; SIGTERM usually only the primary, which forwards it as 'drain'.
  const release = onSignals((name) => current.signal(name));
  // The primary is gone (killed): nobody will forward a signal, so leave cleanly now.
  process.once('disconnect', () => current.drain('primary disconnected'));
  process.send!({ type: 'queen-edge:listening' } satisfies ToPrimary);
  if (drainEarly) current.drain('primary');
  const code = await current.done;
  release();
  return code;
}
