/** SIGHUP reloads the configuration file in a running process, and through the primary in every cluster worker. */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { stringify } from 'yaml';
import { TEST_PLAN, TEST_SECRET } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { edgeTracker, freePort } from './edge-process.js';

const edges = edgeTracker();
const dirs: string[] = [];
const prefixes: string[] = [];
afterEach(async () => {
  await edges.cleanup();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  if (prefixes.length > 0) {
    const redis = await connectTest(SHARED_REDIS_URL, 2000);
    for (const p of prefixes.splice(0)) await flushPrefix(redis, p);
    redis.disconnect();
  }
});

const ADMIN_TOKEN = 'admin-token-for-reload-tests-0123';

function config(httpsPort: number, origins: string[], extra: object = {}, adminPort = 0) {
  return {
    server: { https: { host: '127.0.0.1', port: httpsPort }, admin: { host: '127.0.0.1', port: adminPort, token: ADMIN_TOKEN } },
    log: { level: 'info' },
    auth: { secret: TEST_SECRET },
    plans: { test: TEST_PLAN },
    tenants: { acme: { plan: 'test', hosts: ['acme.localhost'], brokers: ['http://127.0.0.1:9'], cors: { origins } } },
    ...extra,
  };
}

/** A CORS preflight from `origin` on a connection of its own (so the cluster's round-robin moves on). */
async function preflight(port: number, origin: string): Promise<number> {
  const agent = new Agent({ connect: { rejectUnauthorized: false } });
  try {
    const res = await request(`https://127.0.0.1:${port}/api/v1/push`, {
      method: 'OPTIONS',
      headers: { host: 'acme.localhost', origin, 'access-control-request-method': 'POST' },
      dispatcher: agent,
    });
    await res.body.dump();
    return res.statusCode;
  } finally {
    await agent.destroy();
  }
}

/** The last reload as the admin API and /metrics report it, asked on a connection of its own. */
async function reloadReport(adminPort: number): Promise<{ api: any; success: number }> {
  const agent = new Agent();
  try {
    const get = async (path: string) =>
      (await request(`http://127.0.0.1:${adminPort}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, dispatcher: agent })).body.text();
    const api = JSON.parse(await get('/admin/v1/reloads'));
    const success = Number(/^queen_edge_config_last_reload_success (\S+)$/m.exec(await get('/metrics'))?.[1]);
    return { api, success };
  } finally {
    await agent.destroy();
  }
}

async function configFile(content: object): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'qe-reload-'));
  dirs.push(dir);
  const file = join(dir, 'edge.yaml');
  await writeFile(file, stringify(content));
  return file;
}

// Every test starts the CLI under tsx, which takes seconds on a loaded machine.
describe('SIGHUP', { timeout: 60_000 }, () => {
  it('one process: applies a valid file; an invalid one is refused with every problem and the running config stays', async () => {
    const port = await freePort();
    const adminPort = await freePort();
    const file = await configFile(config(port, ['https://a.example'], {}, adminPort));
    const edge = await edges.start({}, ['--config', file]);
    await edge.waitForLog((l) => l.msg === 'queen-edge listening', 40_000);
    expect(await preflight(port, 'https://b.example')).toBe(403);
    expect((await reloadReport(adminPort)).api).toEqual({ last: null, restartNeeded: [], applied: 0, refused: 0 });

    await writeFile(file, stringify(config(port, ['https://b.example'], {}, adminPort)));
    edge.child.kill('SIGHUP');
    await edge.waitForLog((l) => String(l.msg).startsWith('configuration reloaded'), 20_000);
    expect(await preflight(port, 'https://b.example')).toBe(204);
    expect(await preflight(port, 'https://a.example')).toBe(403);
    expect((await reloadReport(adminPort)).api).toMatchObject({ last: { result: 'applied', problems: [] }, applied: 1, refused: 0 });

    const broken = config(port, ['https://c.example'], {}, adminPort);
    await writeFile(file, stringify({ ...broken, tenants: { acme: { ...broken.tenants.acme, plan: 'gold' } }, log: { level: 'loud' } }));
    edge.child.kill('SIGHUP');
    const refused = await edge.waitForLog((l) => l.msg === 'configuration reload refused: keeping the running configuration', 20_000);
    expect(refused.problems).toEqual([expect.stringMatching(/^log\.level:/)]);
    // Still serving, with the last good configuration.
    expect(await preflight(port, 'https://b.example')).toBe(204);
    expect(await preflight(port, 'https://c.example')).toBe(403);
    expect(edge.child.exitCode).toBeNull();
    // The refusal is visible without the logs: the admin API and /metrics.
    const report = await reloadReport(adminPort);
    expect(report.api).toMatchObject({ last: { result: 'refused', problems: [expect.stringMatching(/^log\.level:/)] }, applied: 1, refused: 1 });
    expect(Date.parse(report.api.last.at)).toBeGreaterThan(0);
    expect(report.success).toBe(0);
  });

  it('with cluster workers: the primary validates the file and every worker applies it', async () => {
    const port = await freePort();
    const adminPort = await freePort();
    const prefix = uniquePrefix();
    prefixes.push(prefix);
    const clustered = (origins: string[]) => {
      const c = config(port, origins, { redis: { url: SHARED_REDIS_URL, keyPrefix: prefix } }, adminPort);
      return { ...c, server: { ...c.server, workers: 2 } };
    };
    const file = await configFile(clustered(['https://a.example']));
    const edge = await edges.start({}, ['--config', file]);
    await edge.waitForLog((l) => l.msg === 'all workers listening', 40_000);

    await writeFile(file, stringify(clustered(['https://b.example'])));
    edge.child.kill('SIGHUP');
    for (const worker of [1, 2]) await edge.waitForLog((l) => l.worker === worker && String(l.msg).startsWith('configuration reloaded'), 20_000);
    // Round-robin over fresh connections reaches both workers.
    expect([await preflight(port, 'https://b.example'), await preflight(port, 'https://b.example')]).toEqual([204, 204]);

    // Refused by the primary: each worker's admin API says so (fresh connections reach both).
    await writeFile(file, stringify({ ...clustered(['https://c.example']), log: { level: 'loud' } }));
    edge.child.kill('SIGHUP');
    await edge.waitForLog((l) => l.msg === 'configuration reload refused: keeping the running configuration', 20_000);
    const refusedBy = async () => (await reloadReport(adminPort)).api.refused;
    // The primary's message reaches each worker shortly after its log line: wait on the report itself.
    for (let seen = 0; seen < 2; ) seen = (await refusedBy()) === 1 ? seen + 1 : 0;
    const [a, b] = [await reloadReport(adminPort), await reloadReport(adminPort)];
    for (const r of [a, b]) expect(r.api).toMatchObject({ last: { result: 'refused' }, applied: 1, refused: 1 });
  });
});
