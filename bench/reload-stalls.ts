/**
 * Where a SIGHUP's reload holds the event loop, in one process: an app with N file tenants (the
 * many-tenants bench's file, Redis limits on a private redis-server), the CLI's reload path run on
 * it (the file read on the worker thread, its certificate and key files checked, app.reload), a
 * CPU profile taken meanwhile. Prints every stretch the main thread ran without going back to the
 * event loop, longest first, with the src/ functions its time went to, and the event loop's
 * worst delay (perf_hooks monitorEventLoopDelay).
 *
 *   npx tsx bench/reload-stalls.ts [N=100000] [--plans] [--min-ms 8] [--profile FILE]
 *
 * `--plans` changes a plan instead of one tenant (a reload every tenant follows). `--worker` hands
 * the read to the app as a cluster worker gets it: in parts, each a copy (the primary's IPC).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { PrivateRedis } from '../test/helpers/redis.js';
import { startApp } from '../src/app.js';
import { keepForReloads, loadConfigFile, loadConfigFileOffThread } from '../src/config/load.js';
import { ConfigJoin, splitConfig, type TenantMap, type TenantsPart } from '../src/config/parts.js';
import type { RawConfig } from '../src/config/schema.js';
import { nextTurn } from '../src/config/tenant-ids.js';
import { checkFiles } from '../src/preflight.js';
import { startFastDouble } from './double.js';
import { manyTenantsConfig, tenantId } from './many-tenants.js';
import { freePort, makeCertificate, sleep } from './procs.js';
import type { CpuProfile, ProfileNode } from './profile.js';

/** An event-loop turn that took `ms`: no timer ran from `startUs` on (the clock of the CPU profile, µs). */
interface Stretch {
  startUs: number;
  ms: number;
  /** Milliseconds by the innermost src/ frame of each sample in it (or the sample's own frame outside src/). */
  by: Map<string, number>;
}

const frameName = (n: ProfileNode): string => {
  const src = /\/src\/(.+?\.ts)/.exec(n.callFrame.url);
  return `${n.callFrame.functionName || '(anonymous)'} ${src ? `src/${src[1]}` : n.callFrame.url.replace(/^.*node_modules\//, '')}:${n.callFrame.lineNumber + 1}`;
};

const monotonicUs = (): number => Number(process.hrtime.bigint() / 1000n);

/** Records every gap between two runs of a 1 ms timer longer than `minMs`: the turns that held the event loop. */
function watchTurns(minMs: number): { stop(): Stretch[] } {
  const found: Stretch[] = [];
  let last = monotonicUs();
  const timer = setInterval(() => {
    const now = monotonicUs();
    if (now - last > minMs * 1000) found.push({ startUs: last, ms: (now - last) / 1000, by: new Map() });
    last = now;
  }, 1);
  return {
    stop() {
      clearInterval(timer);
      return found;
    },
  };
}

/** Fills each stretch's `by` from the profile's samples taken within it. */
function attribute(p: CpuProfile, found: Stretch[]): void {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const label = new Map<number, string>();
  const labelOf = (id: number): string => {
    const known = label.get(id);
    if (known !== undefined) return known;
    let at: number | undefined = id;
    let found: string | null = null;
    while (at !== undefined) {
      const n = byId.get(at)!;
      if (/\/src\/.+\.ts/.test(n.callFrame.url) && !n.callFrame.url.includes('node_modules')) {
        found = frameName(n);
        break;
      }
      at = parent.get(at);
    }
    const l = found ?? frameName(byId.get(id)!);
    label.set(id, l);
    return l;
  };
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i]!;
    const dt = (p.timeDeltas[i + 1] ?? 0) / 1000;
    const s = found.find((f) => t >= f.startUs && t < f.startUs + f.ms * 1000);
    if (s === undefined) continue;
    const l = labelOf(p.samples[i]!);
    s.by.set(l, (s.by.get(l) ?? 0) + dt);
  }
}

/** `config` as a cluster worker holding `held` receives it (supervisor.ts): split, each part copied as IPC copies it, joined. */
async function asWorkerGetsIt(config: RawConfig, held: TenantMap): Promise<RawConfig> {
  const { head, parts } = splitConfig(config, held);
  const join = new ConfigJoin(structuredClone(head), held);
  for (const part of parts) {
    join.add(JSON.parse(JSON.stringify(part)) as TenantsPart);
    await nextTurn();
  }
  return join.config();
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      plans: { type: 'boolean', default: false },
      worker: { type: 'boolean', default: false },
      'min-ms': { type: 'string', default: '8' },
      profile: { type: 'string' },
    },
  });
  const n = Number(positionals[0] ?? 100_000);
  const dir = await mkdtemp(join(tmpdir(), 'queen-edge-stalls-'));
  const redis = await PrivateRedis.start();
  const doubles = await Promise.all(Array.from({ length: 4 }, () => startFastDouble(0)));
  const settings = {
    port: await freePort(),
    adminPort: await freePort(),
    ...(await makeCertificate(dir)),
    brokers: doubles.map((d) => `http://127.0.0.1:${d.port}`),
    redisUrl: redis.url,
  };
  const file = join(dir, 'many.json');
  await writeFile(file, JSON.stringify(manyTenantsConfig(n, settings)));
  // As the CLI starts: the file read here, its tenants kept for the reload's read.
  const config = await loadConfigFile(file);
  keepForReloads(config.tenants);
  const app = await startApp(config);
  try {
    // Settles the start's own work (a full build's slices).
    await sleep(1000);
    const next = manyTenantsConfig(n, settings, n - 1) as { plans: Record<string, { limits: Record<string, number> }> };
    if (values.plans) next.plans.small!.limits.requestsPerSec = 12_345;
    await writeFile(file, JSON.stringify(next));

    const session = new Session();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 250 });
    await session.post('Profiler.start');
    const delay = monitorEventLoopDelay({ resolution: 5 });
    delay.enable();
    const minMs = Number(values['min-ms']);
    const turns = watchTurns(minMs);
    const t0 = performance.now();
    // The CLI's path (supervisor.ts, runInProcess): read off-thread, files checked, applied.
    const read = values.worker ? await asWorkerGetsIt(await loadConfigFileOffThread(file), config.tenants) : await loadConfigFileOffThread(file);
    const tRead = performance.now();
    const { problems } = await checkFiles(read);
    if (problems.length > 0) throw new Error(problems.join('\n'));
    const tChecked = performance.now();
    await app.reload(read);
    const tApplied = performance.now();
    const changed = app.tenants.byId(tenantId(n - 1))?.status;
    // Slices the reload left running after it returned (adopting the new file's objects).
    await sleep(1000);
    delay.disable();
    const long = turns.stop();
    const { profile } = (await session.post('Profiler.stop')) as { profile: CpuProfile };
    session.disconnect();
    if (values.profile) await writeFile(values.profile, JSON.stringify(profile));

    const log = (l: string): void => void process.stdout.write(`${l}\n`);
    log(
      `${n} tenants${values.plans ? ', a plan changed' : ''}: read ${Math.round(tRead - t0)} ms, checked ${Math.round(tChecked - tRead)} ms, applied ${Math.round(tApplied - tChecked)} ms; tenant ${tenantId(n - 1)} ${changed}`,
    );
    log(`event loop delay: max ${(delay.max / 1e6).toFixed(1)} ms, p99 ${(delay.percentile(99) / 1e6).toFixed(1)} ms`);
    attribute(profile, long);
    long.sort((a, b) => b.ms - a.ms);
    for (const s of long) {
      log(`\n${s.ms.toFixed(1)} ms at +${Math.round((s.startUs - profile.startTime) / 1000)} ms`);
      for (const [name, ms] of [...s.by].sort((a, b) => b[1] - a[1]).slice(0, 6)) log(`  ${ms.toFixed(1).padStart(6)}  ${name}`);
    }
  } finally {
    await app.close(100);
    await Promise.all(doubles.map((d) => d.close()));
    await redis.kill();
    await rm(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
