/**
 * The "many tenants" scenario: an edge (one worker) with N file tenants (bench/many-tenants-config.ts)
 * over four tenancy-aware broker doubles, and a steady client pushing every 20 ms. Measures the
 * start (spawn to /readyz 200), idle RSS, the steady client's worst wait while nothing changes,
 * during a SIGHUP reload changing one tenant and during admin PUTs of new tenants (with Redis),
 * each PUT's latency and when the new tenant is served (with --instances 2, by the other instance).
 *
 *   tsx bench/many-dir.ts N [--redis redis://127.0.0.1:6379] [--instances 2] [--repo DIR] [--yaml]
 *
 * `--repo` runs another checkout's build (the "before"); both are compiled with tsc first.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { closeSync, openSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { Agent, request as httpsRequest } from 'node:https';
import { join, resolve } from 'node:path';
import { SignJWT } from 'jose';
import { stringify } from 'yaml';
import { startFastDouble } from './double.js';
import { MANY_SECRET, manyTenant, manyTenantsConfig, STEADY_HOST, STEADY_TENANT, tenantId } from './many-tenants-config.js';
import { freePort, sleep } from './procs.js';

const ADMIN_TOKEN = 'many-admin-token-0123456789';
const args = process.argv.slice(2);
const opt = (name: string): string | undefined => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const N = Number(args[0]);
const redisUrl = opt('--redis') ?? null;
const instances = Number(opt('--instances') ?? '1');
const repo = resolve(opt('--repo') ?? '.');
const yaml = args.includes('--yaml');
const dir = `/tmp/qe-many-${process.pid}`;
/** Records of this run only (the admin PUTs' tenants); left for Redis to keep, under a prefix no one else reads. */
const keyPrefix = `qe-many-${process.pid}:`;

function build(): string {
  // Inside the checkout, so the build finds its node_modules (.tmp/ is ignored by git).
  const out = join(repo, '.tmp', `many-dist-${process.pid}`);
  const r = spawnSync(process.execPath, [join(repo, 'node_modules/typescript/bin/tsc'), '-p', join(repo, 'tsconfig.build.json'), '--outDir', out], {
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(r.stdout + r.stderr);
  return join(out, 'cli.js');
}

function admin(port: number, method: string, path: string, body?: unknown): Promise<{ status: number; ms: number; text: string }> {
  const started = performance.now();
  return new Promise((ok, fail) => {
    const req = httpRequest(
      { host: '127.0.0.1', port, method, path, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' } },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => ok({ status: res.statusCode ?? 0, ms: performance.now() - started, text }));
      },
    );
    req.on('error', fail);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

const agent = new Agent({ keepAlive: true, rejectUnauthorized: false, maxSockets: 4 });
function push(port: number, host: string, token: string): Promise<{ status: number; ms: number }> {
  const started = performance.now();
  const body = JSON.stringify({ items: [{ queue: 'q', partition: 'p', payload: { n: 1 } }] });
  return new Promise((ok, fail) => {
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/api/v1/push',
        agent,
        headers: { host, authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      },
      (res) => {
        res.resume();
        res.on('end', () => ok({ status: res.statusCode ?? 0, ms: performance.now() - started }));
      },
    );
    req.on('error', fail);
    req.end(body);
  });
}

const token = (tenant: string): Promise<string> =>
  new SignJWT({ roles: ['read-write'], tenant })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('many')
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(MANY_SECRET));

/** A client pushing every 20 ms; `worst()` is the longest answer since the last reset. */
function steadyClient(port: number, tok: string) {
  let worst = 0;
  let errors = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      const r = await push(port, STEADY_HOST, tok).catch(() => ({ status: 0, ms: 0 }));
      if (r.status !== 201 && r.status !== 200) errors++;
      worst = Math.max(worst, r.ms);
      await sleep(20);
    }
  })();
  return {
    reset: () => {
      worst = 0;
    },
    worst: () => worst,
    errors: () => errors,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}

function rssMiB(pid: number): Promise<number> {
  return readFile(`/proc/${pid}/status`, 'utf8').then((s) => Number(/VmRSS:\s+(\d+)/.exec(s)![1]) / 1024);
}

interface Edge {
  child: ChildProcess;
  port: number;
  adminPort: number;
  configFile: string;
  startMs: number;
}

async function startEdge(cli: string, name: string, brokers: string[]): Promise<Edge> {
  const port = await freePort();
  const adminPort = await freePort();
  const config = manyTenantsConfig({ tenants: N, brokers, redisUrl, keyPrefix, httpsPort: port, adminPort, adminToken: ADMIN_TOKEN });
  const configFile = join(dir, `${name}.${yaml ? 'yaml' : 'json'}`);
  writeFileSync(configFile, yaml ? stringify(config) : JSON.stringify(config));
  const out = openSync(join(dir, `${name}.log`), 'a');
  const started = performance.now();
  const child = spawn(process.execPath, [cli, '--config', configFile], { stdio: ['ignore', out, out], cwd: repo });
  closeSync(out);
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${name} exited ${child.exitCode}; see ${dir}/${name}.log`);
    const r = await admin(adminPort, 'GET', '/readyz').catch(() => ({ status: 0 }));
    if (r.status === 200) break;
    await sleep(100);
  }
  return { child, port, adminPort, configFile, startMs: performance.now() - started };
}

const progress = (r: unknown): void => void process.stderr.write(`${JSON.stringify(r)}\n`);

async function main(): Promise<void> {
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true });
  const cli = build();
  const doubles = await Promise.all([0, 1, 2, 3].map(() => startFastDouble()));
  const brokers = doubles.map((d) => `http://127.0.0.1:${d.port}`);
  const edges: Edge[] = [];
  const report: Record<string, unknown> = { tenants: N, repo, redis: redisUrl !== null, format: yaml ? 'yaml' : 'json' };
  try {
    for (let i = 0; i < instances; i++) edges.push(await startEdge(cli, `edge${i}`, brokers));
    const a = edges[0]!;
    report.startMs = Math.round(a.startMs);
    progress(report);
    await sleep(3000);
    report.idleRssMiB = Math.round(await rssMiB(a.child.pid!));
    const steady = steadyClient(a.port, await token(STEADY_TENANT));
    await sleep(2000);
    steady.reset();
    await sleep(3000);
    report.worstIdleMs = Math.round(steady.worst());
    progress(report);

    // SIGHUP with one tenant changed (its plan): the change is seen through the admin API.
    const changed = tenantId(5);
    const config = manyTenantsConfig({ tenants: N, brokers, redisUrl, keyPrefix, httpsPort: a.port, adminPort: a.adminPort, adminToken: ADMIN_TOKEN });
    (config.tenants as Record<string, Record<string, unknown>>)[changed]!.plan = 'pro';
    writeFileSync(a.configFile, yaml ? stringify(config) : JSON.stringify(config));
    steady.reset();
    const hup = performance.now();
    a.child.kill('SIGHUP');
    for (;;) {
      const r = await admin(a.adminPort, 'GET', `/admin/v1/tenants/${changed}`);
      if (r.text.includes('"pro"')) break;
      await sleep(20);
    }
    report.reloadAppliedMs = Math.round(performance.now() - hup);
    await sleep(500);
    report.worstDuringReloadMs = Math.round(steady.worst());
    progress(report);

    if (redisUrl !== null) {
      const puts: number[] = [];
      const served: number[] = [];
      steady.reset();
      for (let k = 0; k < 10; k++) {
        const id = `new${Date.now()}${k}`;
        // Without an IdP of its own: the bench's token is signed with the global key.
        const raw: Record<string, unknown> = { ...manyTenant(N + k + 1, brokers), hosts: [`${id}.many`] };
        delete raw.auth;
        const put = await admin(a.adminPort, 'PUT', `/admin/v1/tenants/${id}`, raw);
        if (put.status !== 200 && put.status !== 201) throw new Error(`PUT ${put.status} ${put.text}`);
        puts.push(put.ms);
        // Served by the last instance (the other one when there are two): a push to its host answers.
        const peer = edges[edges.length - 1]!;
        const tok = await token(id);
        const since = performance.now() - put.ms;
        for (let tries = 0; ; tries++) {
          const r = await push(peer.port, `${id}.many`, tok);
          if (r.status === 201 || r.status === 200) break;
          if (tries > 1000) throw new Error(`new tenant ${id} answered ${r.status}`);
          await sleep(10);
        }
        served.push(performance.now() - since);
        await sleep(100);
      }
      report.putMs = { max: Math.round(Math.max(...puts)), median: Math.round(puts.sort((x, y) => x - y)[5]!) };
      report.newTenantServedMs = Math.round(Math.max(...served));
      report.worstDuringPutsMs = Math.round(steady.worst());
    }
    report.steadyErrors = steady.errors();
    await steady.stop();
  } finally {
    for (const e of edges) e.child.kill('SIGTERM');
    for (const d of doubles) await d.close();
    agent.destroy();
  }
  console.log(JSON.stringify(report));
}

await main();
process.exit(0);
