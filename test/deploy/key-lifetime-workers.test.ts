/**
 * A key dies with its tenant under cluster workers: a file tenant removed by a SIGHUP (which every
 * worker applies) takes its API keys, on every worker, and added back under its id starts with none.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { apiKeyKeys } from '../../src/redis/keys.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, TEST_SECRET } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { edgeTracker, freePort, freshRequest, type EdgeProcess } from './edge-process.js';

const ADMIN_TOKEN = 'admin-token-for-the-workers-test-01';
const edges = edgeTracker();
const prefix = uniquePrefix();
let broker: BrokerDouble;
let dir: string;

beforeAll(async () => {
  broker = await startBrokerDouble({ pushStatus: 201 });
  dir = await mkdtemp(join(tmpdir(), 'qe-key-workers-'));
});
afterAll(async () => {
  await edges.cleanup();
  await broker?.close();
  await rm(dir, { recursive: true, force: true });
  const redis = await connectTest(SHARED_REDIS_URL, 2000);
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

function config(port: number, adminPort: number, bHost: string | null) {
  const tenant = (host: string) => ({ plan: 'test', hosts: [host], brokers: [broker.url], tenancyAwareBrokers: true });
  return {
    server: { workers: 2, https: { host: '127.0.0.1', port }, admin: { host: '127.0.0.1', port: adminPort, token: ADMIN_TOKEN } },
    log: { level: 'info' },
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
    auth: { secret: TEST_SECRET },
    plans: { test: TEST_PLAN },
    tenants: { acme: tenant('acme.localhost'), ...(bHost === null ? {} : { b: tenant(bHost) }) },
  };
}

/** Every worker's line matching `msg` after `from` log lines. */
function bothWorkers(edge: EdgeProcess, from: number, msg: string): Promise<unknown> {
  return Promise.all([1, 2].map((worker) => edge.waitForLog((l) => edge.lines.indexOf(l) >= from && l.worker === worker && l.msg === msg, 20_000)));
}

// Starts the CLI with two workers under tsx: seconds on a loaded machine.
describe('API keys and a reload with cluster workers', { timeout: 60_000 }, () => {
  it('a tenant removed by SIGHUP takes its keys on both workers; back under its id, the old key is refused by both', async () => {
    const [port, adminPort] = [await freePort(), await freePort()];
    const file = join(dir, 'edge.yaml');
    await writeFile(file, stringify(config(port, adminPort, 'b.localhost')));
    const edge = await edges.start({}, ['--config', file]);
    await edge.waitForLog((l) => l.msg === 'all workers listening', 40_000);
    const created = await freshRequest(`http://127.0.0.1:${adminPort}/admin/v1/tenants/b/keys`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'old customer', roles: ['read-write'] }),
    });
    expect(created.status).toBe(201);
    const { key } = JSON.parse(created.text) as { key: string };
    // Fresh connections: the primary hands each to the next worker.
    const twice = async (host: string) => {
      const one = async () =>
        (
          await freshRequest(`https://127.0.0.1:${port}/api/v1/push`, {
            method: 'POST',
            headers: { host, 'content-type': 'application/json', authorization: `Bearer ${key}` },
            body: JSON.stringify({ items: [{ queue: 'q', payload: 1 }] }),
          })
        ).status;
      return [await one(), await one()];
    };
    expect(await twice('b.localhost')).toEqual([201, 201]);
    const reload = async (bHost: string | null) => {
      await writeFile(file, stringify(config(port, adminPort, bHost)));
      const from = edge.lines.length;
      edge.child.kill('SIGHUP');
      await bothWorkers(edge, from, 'configuration reloaded: tenants, plans, routes, CORS and the settings listed');
    };
    await reload(null);
    expect(await twice('b.localhost')).toEqual([401, 401]);
    const redis = await connectTest(SHARED_REDIS_URL, 2000);
    try {
      await waitFor(async () => (await redis.smembers(apiKeyKeys(prefix).tenant('b'))).length === 0, 5000, "b's keys revoked in Redis");
    } finally {
      redis.disconnect();
    }
    await reload('b2.localhost');
    expect(await twice('b2.localhost')).toEqual([401, 401]);
  });
});
