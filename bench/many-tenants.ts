/**
 * The "many tenants" scenario (BENCHMARKS.md): what the number of tenants costs an operator.
 *
 * For each tenant count: file tenants spread over four tenancy-aware brokers (fast doubles in this
 * process), Redis limits (a private redis-server), one worker, a steady client pushing every
 * 20 ms. Measured: the start (spawn to /readyz 200), idle RSS, the steady client's worst wait with
 * nothing changing, during a SIGHUP reload that changes one tenant, and during admin PUTs of new
 * tenants on the existing brokers, then of new tenants each on a broker URL no tenant listed yet
 * (each PUT's answer time, and when the new tenant is served), /readyz's and /metrics' answer
 * times and /metrics (bytes, series) after up to 2,000 tenants pushed once, and the first page of
 * GET /admin/v1/tenants and of GET /admin/v1/brokers (its answer time too).
 *
 *   npm run bench:many-tenants -- --tenants 1000,10000 [--edge-root DIR] [--start-timeout-s 180] [--out FILE]
 *
 * `--edge-root` runs another checkout's src/ (e.g. an unpacked older commit, for the before
 * figures; its node_modules must resolve). The edge runs from source with tsx, so figures compare
 * between runs of this script, not with the request-path rows of bench/run.ts.
 */
import { createHmac } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { PrivateRedis } from '../test/helpers/redis.js';
import { startFastDouble, type FastDouble } from './double.js';
import { REPO_ROOT } from './edge.js';
import { freePort, loadAverage, makeCertificate, sleep, spawnWithLimits, stopChild, treeRssBytes } from './procs.js';

const SECRET = 'queen-edge-bench-secret-0123456789abcdef';
const ADMIN_TOKEN = 'many-tenants-admin-token-0123456789';
const BROKERS = 4;
/** Admin PUTs of new tenants per variant (existing brokers, then a new broker URL each). */
const PUTS = 5;
/** Tenants that push once before /metrics is read (the "2,000 tenants were active"). */
const ACTIVE = 2000;
const STEADY_EVERY_MS = 20;

const PLAN = {
  features: [],
  limits: {
    requestsPerSec: 10_000,
    requestBurst: 10_000,
    messagesPerSec: 100_000,
    messageBurst: 100_000,
    parkedPolls: 1000,
    maxPayloadBytes: 1_048_576,
    maxBatch: 1000,
  },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 1_099_511_627_776,
};

/** The i-th generated tenant's id: zero-padded, so ids sort as their numbers do. */
export function tenantId(i: number): string {
  return `m${String(i).padStart(6, '0')}`;
}

/** A tenant record as the file and the admin API take it. */
function tenantRecord(i: number, brokers: readonly string[], status: 'active' | 'suspended' = 'active'): Record<string, unknown> {
  return { plan: i % 2 === 0 ? 'small' : 'large', status, hosts: [`${tenantId(i)}.bench`], brokers: [brokers[i % brokers.length]], tenancyAwareBrokers: true };
}

/** The configuration with `n` tenants; `changed` suspends one of them (the SIGHUP's change). */
export function manyTenantsConfig(
  n: number,
  c: { port: number; adminPort: number; cert: string; key: string; brokers: readonly string[]; redisUrl: string; workers?: number },
  changed = -1,
): Record<string, unknown> {
  const tenants: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) tenants[tenantId(i)] = tenantRecord(i, c.brokers, i === changed ? 'suspended' : 'active');
  return {
    server: {
      https: { host: '127.0.0.1', port: c.port, cert: c.cert, key: c.key },
      http: { port: null },
      admin: { host: '127.0.0.1', port: c.adminPort, token: ADMIN_TOKEN },
      workers: c.workers ?? 1,
      drainTimeoutMs: 1000,
    },
    log: { level: 'warn', accessLog: false },
    redis: { url: c.redisUrl, keyPrefix: 'qe-many:', failMode: 'local' },
    auth: { secret: SECRET, defaultTenant: null },
    plans: { small: PLAN, large: { ...PLAN, limits: { ...PLAN.limits, requestsPerSec: 20_000 } } },
    tenants,
  };
}

/** An HS256 token for `tenant`, signed with node:crypto (jose's async signing of thousands is slow). */
function tokenFor(tenant: string): string {
  const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const head = `${part({ alg: 'HS256' })}.${part({ sub: 'bench', roles: ['read-write'], tenant, iat: now, exp: now + 7200 })}`;
  return `${head}.${createHmac('sha256', SECRET).update(head).digest('base64url')}`;
}

/** One tenant count's figures; null where the step did not run (the edge did not start). */
export interface ManyTenantsRow {
  tenants: number;
  configBytes: number;
  started: boolean;
  startSeconds: number | null;
  idleRssMiB: number | null;
  /** The steady client's worst wait over 5 s with nothing changing. */
  steadyIdleWorstMs: number | null;
  /** SIGHUP (one tenant suspended) until the admin API shows it. */
  reloadSeconds: number | null;
  steadyReloadWorstMs: number | null;
  /** Each admin PUT of a new tenant: its answer time, and until a request on its host is served. */
  putMs: number[];
  /** PUTs answered with something else than 200: status and the start of the body. */
  putFailures: string[];
  servedAfterPutMs: number[];
  steadyPutsWorstMs: number | null;
  /** The same for PUTs of new tenants each listing a broker URL no tenant listed before. */
  newBrokerPutMs: number[];
  newBrokerServedAfterPutMs: number[];
  steadyNewBrokerPutsWorstMs: number | null;
  /** Median answer time of 21 `/readyz` probes one after another, and the `/metrics` read's. */
  readyzMs: number | null;
  metricsMs: number | null;
  metricsBytes: number | null;
  metricsSeries: number | null;
  activeTenants: number;
  tenantListBytes: number | null;
  /** Median answer time of 5 `GET /admin/v1/brokers` without parameters, and its size. */
  brokersMs: number | null;
  brokersBytes: number | null;
  load1: number;
}

/** Pushes for one tenant every STEADY_EVERY_MS; `worst()` is the longest answer since the last reset. */
class SteadyClient {
  #worst = 0;
  /** When the request in flight was sent; null between requests. */
  #sentAt: number | null = null;
  #errors = 0;
  #running = true;
  readonly #done: Promise<void>;

  constructor(base: string, dispatcher: Agent, host: string, tok: string) {
    this.#done = (async () => {
      while (this.#running) {
        const t0 = performance.now();
        this.#sentAt = t0;
        try {
          const r = await request(`${base}/api/v1/push`, {
            method: 'POST',
            dispatcher,
            headers: { host, authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
            body: JSON.stringify({ items: [{ queue: 'steady', payload: { t: Date.now() } }] }),
          });
          await r.body.text();
          if (r.statusCode !== 201) this.#errors++;
        } catch {
          this.#errors++;
        }
        const took = performance.now() - t0;
        this.#sentAt = null;
        this.#worst = Math.max(this.#worst, took);
        await sleep(Math.max(0, STEADY_EVERY_MS - took));
      }
    })();
  }

  reset(): void {
    this.#worst = 0;
    if (this.#sentAt !== null) this.#sentAt = performance.now();
  }

  /** Includes the request still in flight: a stall that has not ended yet counts too. */
  worst(): number {
    return Math.round(Math.max(this.#worst, this.#sentAt === null ? 0 : performance.now() - this.#sentAt));
  }

  get errors(): number {
    return this.#errors;
  }

  async stop(): Promise<void> {
    this.#running = false;
    await this.#done;
  }
}

async function adminCall(adminBase: string, method: 'GET' | 'PUT', path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const r = await request(`${adminBase}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: r.statusCode, text: await r.body.text() };
}

async function until(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    // A failed check (connection refused while starting) is a no; an exited edge ends the wait.
    if (await check().catch((err: Error) => (err.message.startsWith('edge exited') ? Promise.reject(err) : false))) return performance.now() - t0;
    if (performance.now() - t0 > timeoutMs) throw new Error(`${what}: not after ${timeoutMs} ms`);
    await sleep(10);
  }
}

/** Admin PUTs of new tenants `first`, `first + 1`, … one after another, on `brokersOf(k)`; each PUT's answer time and when its tenant is served. */
async function putNewTenants(
  first: number,
  brokersOf: (k: number) => readonly string[],
  c: { adminBase: string; base: string; dispatcher: Agent },
): Promise<{ putMs: number[]; servedMs: number[]; failures: string[] }> {
  const out = { putMs: [] as number[], servedMs: [] as number[], failures: [] as string[] };
  for (let k = 0; k < PUTS; k++) {
    const i = first + k;
    const id = tenantId(i);
    const p0 = performance.now();
    // tenantRecord lists brokers[i % length]: a one-URL list gives that URL.
    const put = await adminCall(c.adminBase, 'PUT', `/admin/v1/tenants/${id}`, tenantRecord(i, brokersOf(k)));
    const answered = performance.now();
    out.putMs.push(Math.round(answered - p0));
    if (put.status !== 200) {
      // Recorded, not fatal: a refused PUT is a finding (the store timed out under the load).
      out.failures.push(`${put.status} ${put.text.slice(0, 120)}`);
      continue;
    }
    const tok = tokenFor(id);
    await until(`${id} served`, 60_000, async () => {
      const r = await request(`${c.base}/api/v1/push`, {
        method: 'POST',
        dispatcher: c.dispatcher,
        headers: { host: `${id}.bench`, authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
        body: '{"items":[{"queue":"q","payload":1}]}',
      });
      await r.body.text();
      return r.statusCode === 201;
    });
    out.servedMs.push(Math.round(performance.now() - answered));
  }
  return out;
}

/** Runs the scenario for `n` tenants; `spare` are brokers no tenant lists, one per PUT of the new-broker variant. */
export async function runManyTenants(
  n: number,
  o: {
    dir: string;
    edgeRoot: string;
    startTimeoutMs: number;
    doubles: readonly FastDouble[];
    spare: readonly FastDouble[];
    redis: PrivateRedis;
    log: (l: string) => void;
    workers: number;
  },
): Promise<ManyTenantsRow> {
  const row: ManyTenantsRow = {
    tenants: n,
    configBytes: 0,
    started: false,
    startSeconds: null,
    idleRssMiB: null,
    steadyIdleWorstMs: null,
    reloadSeconds: null,
    steadyReloadWorstMs: null,
    putMs: [],
    putFailures: [],
    servedAfterPutMs: [],
    steadyPutsWorstMs: null,
    newBrokerPutMs: [],
    newBrokerServedAfterPutMs: [],
    steadyNewBrokerPutsWorstMs: null,
    readyzMs: null,
    metricsMs: null,
    metricsBytes: null,
    metricsSeries: null,
    activeTenants: Math.min(ACTIVE, n),
    tenantListBytes: null,
    brokersMs: null,
    brokersBytes: null,
    load1: loadAverage(),
  };
  const certs = await makeCertificate(o.dir);
  const settings = {
    port: await freePort(),
    adminPort: await freePort(),
    ...certs,
    brokers: o.doubles.map((d) => `http://127.0.0.1:${d.port}`),
    redisUrl: o.redis.url,
    workers: o.workers,
  };
  const configFile = join(o.dir, `many-${n}.json`);
  const text = JSON.stringify(manyTenantsConfig(n, settings));
  row.configBytes = Buffer.byteLength(text);
  await writeFile(configFile, text);
  const adminBase = `http://127.0.0.1:${settings.adminPort}`;
  const base = `https://127.0.0.1:${settings.port}`;
  const t0 = performance.now();
  const child = spawnWithLimits([process.execPath, '--import', 'tsx', join(o.edgeRoot, 'src', 'cli.ts'), '--config', configFile], {
    stdio: ['ignore', 'ignore', 'inherit'],
    cwd: o.edgeRoot,
  });
  const dispatcher = new Agent({ connect: { rejectUnauthorized: false }, keepAliveTimeout: 10_000 });
  let steady: SteadyClient | null = null;
  try {
    try {
      await until('ready', o.startTimeoutMs, async () => {
        if (child.exitCode !== null) return Promise.reject(new Error(`edge exited with ${child.exitCode}`));
        const r = await request(`${adminBase}/readyz`);
        await r.body.text();
        return r.statusCode === 200;
      });
    } catch (err) {
      o.log(`  ${n} tenants: did not start (${(err as Error).message})`);
      return row;
    }
    row.started = true;
    row.startSeconds = (performance.now() - t0) / 1000;
    o.log(`  ${n} tenants: started in ${row.startSeconds.toFixed(1)} s`);
    await sleep(2000);
    row.idleRssMiB = Math.round(treeRssBytes(child.pid!) / 1048576);

    steady = new SteadyClient(base, dispatcher, `${tenantId(0)}.bench`, tokenFor(tenantId(0)));
    await sleep(1000);
    steady.reset();
    await sleep(5000);
    row.steadyIdleWorstMs = steady.worst();

    // SIGHUP with one tenant suspended in the file.
    const changed = n - 1;
    await writeFile(configFile, JSON.stringify(manyTenantsConfig(n, settings, changed)));
    steady.reset();
    const hup = performance.now();
    child.kill('SIGHUP');
    await until(
      'reload applied',
      300_000,
      async () => JSON.parse((await adminCall(adminBase, 'GET', `/admin/v1/tenants/${tenantId(changed)}`)).text).status === 'suspended',
    );
    row.reloadSeconds = (performance.now() - hup) / 1000;
    await sleep(500);
    row.steadyReloadWorstMs = steady.worst();
    o.log(`  ${n} tenants: reload ${row.reloadSeconds.toFixed(2)} s, steady worst ${row.steadyReloadWorstMs} ms (idle ${row.steadyIdleWorstMs} ms)`);

    // Admin PUTs of new tenants on the existing brokers, one after another.
    const calls = { adminBase, base, dispatcher };
    steady.reset();
    const known = await putNewTenants(n, () => settings.brokers, calls);
    await sleep(200);
    row.steadyPutsWorstMs = steady.worst();
    row.putMs = known.putMs;
    row.servedAfterPutMs = known.servedMs;
    // Then new tenants each on a broker URL no tenant listed yet: the broker set changes with each.
    steady.reset();
    const fresh = await putNewTenants(n + PUTS, (k) => [`http://127.0.0.1:${o.spare[k]!.port}`], calls);
    await sleep(200);
    row.steadyNewBrokerPutsWorstMs = steady.worst();
    row.newBrokerPutMs = fresh.putMs;
    row.newBrokerServedAfterPutMs = fresh.servedMs;
    row.putFailures = [...known.failures, ...fresh.failures];
    if (row.putFailures.length > 0) o.log(`  ${n} tenants: PUTs refused: ${row.putFailures.join(' | ')}`);
    o.log(`  ${n} tenants: PUTs ${row.putMs.join(', ')} ms, served after ${row.servedAfterPutMs.join(', ')} ms, steady worst ${row.steadyPutsWorstMs} ms`);
    o.log(
      `  ${n} tenants: PUTs on a new broker ${row.newBrokerPutMs.join(', ')} ms, served after ${row.newBrokerServedAfterPutMs.join(', ')} ms, steady worst ${row.steadyNewBrokerPutsWorstMs} ms`,
    );
    await steady.stop();
    steady = null;

    // Up to ACTIVE tenants push once, 20 at a time.
    for (let from = 0; from < row.activeTenants; from += 20) {
      await Promise.all(
        Array.from({ length: Math.min(20, row.activeTenants - from) }, async (_, k) => {
          const id = tenantId(from + k);
          const r = await request(`${base}/api/v1/push`, {
            method: 'POST',
            dispatcher,
            headers: { host: `${id}.bench`, authorization: `Bearer ${tokenFor(id)}`, 'content-type': 'application/json' },
            body: '{"items":[{"queue":"q","payload":1}]}',
          });
          await r.body.text();
        }),
      );
    }
    await sleep(1500); // usage families are read up to the meter's last flush (every second)
    const probes: number[] = [];
    for (let k = 0; k < 21; k++) {
      const r0 = performance.now();
      await adminCall(adminBase, 'GET', '/readyz');
      probes.push(performance.now() - r0);
    }
    row.readyzMs = Math.round(probes.sort((a, b) => a - b)[10]! * 10) / 10;
    const m0 = performance.now();
    const metrics = await adminCall(adminBase, 'GET', '/metrics');
    row.metricsMs = Math.round(performance.now() - m0);
    row.metricsBytes = Buffer.byteLength(metrics.text);
    row.metricsSeries = metrics.text.split('\n').filter((l) => l !== '' && !l.startsWith('#')).length;
    row.tenantListBytes = Buffer.byteLength((await adminCall(adminBase, 'GET', '/admin/v1/tenants')).text);
    const brokerReads: number[] = [];
    for (let k = 0; k < 5; k++) {
      const b0 = performance.now();
      row.brokersBytes = Buffer.byteLength((await adminCall(adminBase, 'GET', '/admin/v1/brokers')).text);
      brokerReads.push(performance.now() - b0);
    }
    row.brokersMs = Math.round(brokerReads.sort((a, b) => a - b)[2]! * 10) / 10;
    o.log(
      `  ${n} tenants: /readyz ${row.readyzMs} ms (median); /metrics ${row.metricsMs} ms, ${row.metricsSeries} series (${Math.round(row.metricsBytes / 1024)} KiB) after ${row.activeTenants} active; tenant list ${Math.round(row.tenantListBytes / 1024)} KiB; brokers ${row.brokersMs} ms (median), ${Math.round(row.brokersBytes! / 1024)} KiB`,
    );
    return row;
  } finally {
    await steady?.stop();
    await dispatcher.destroy();
    await stopChild(child, 10_000);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      tenants: { type: 'string', default: '1000,10000,100000' },
      'edge-root': { type: 'string', default: REPO_ROOT },
      'start-timeout-s': { type: 'string', default: '180' },
      out: { type: 'string' },
      workers: { type: 'string', default: '1' },
    },
  });
  const counts = values.tenants.split(',').map(Number);
  const edgeRoot = resolve(values['edge-root']);
  const log = (l: string) => process.stdout.write(`${l}\n`);
  const dir = await mkdtemp(join(tmpdir(), 'queen-edge-many-'));
  const doubles = await Promise.all(Array.from({ length: BROKERS }, () => startFastDouble(0)));
  const spare = await Promise.all(Array.from({ length: PUTS }, () => startFastDouble(0)));
  const rows: ManyTenantsRow[] = [];
  log(`many tenants: ${counts.join(', ')} tenants, ${values.workers} worker(s), edge from ${edgeRoot}; 1-min load ${loadAverage()}`);
  try {
    for (const n of counts) {
      // A fresh Redis per count: tenant records a previous count's PUTs left would be loaded too.
      const redis = await PrivateRedis.start();
      try {
        rows.push(
          await runManyTenants(n, {
            dir,
            edgeRoot,
            startTimeoutMs: Number(values['start-timeout-s']) * 1000,
            doubles,
            spare,
            redis,
            log,
            workers: Number(values.workers),
          }),
        );
      } finally {
        await redis.kill();
      }
    }
  } finally {
    await Promise.all([...doubles, ...spare].map((d) => d.close()));
    await rm(dir, { recursive: true, force: true });
  }
  const doc = JSON.stringify({ date: new Date().toISOString(), edgeRoot, rows }, null, 2);
  if (values.out) await writeFile(values.out, `${doc}\n`);
  else log(doc);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? err}\n`);
    process.exit(1);
  });
}
