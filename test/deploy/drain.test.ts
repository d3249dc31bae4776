/**
 * The single-process drain (SIGTERM exits 0; a second signal gives up on a drain held open by a
 * parked poll), and the cluster primary giving up, exit 1, when its workers cannot start at all.
 */
import { createServer, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, TEST_SECRET, token } from '../helpers/edge.js';
import { SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { edgeTracker, freePort } from './edge-process.js';

const edges = edgeTracker();
const start = edges.start;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  await edges.cleanup();
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function broker(): Promise<BrokerDouble> {
  const b = await startBrokerDouble({ name: 'b1' });
  cleanups.push(() => b.close());
  return b;
}

function edgeConfig(brokerUrl: string, server: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    server: { https: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, ...server },
    log: { level: 'info' },
    auth: { secret: TEST_SECRET },
    upstream: { healthIntervalMs: 200, healthTimeoutMs: 200 },
    plans: { test: TEST_PLAN },
    tenants: { acme: { plan: 'test', hosts: ['acme.localhost'], brokers: [brokerUrl] } },
    ...extra,
  };
}

describe('single process (server.workers: 1)', () => {
  it('SIGTERM drains and exits 0', async () => {
    const b = await broker();
    const edge = await start(edgeConfig(b.url, { workers: 1 }));
    await edge.waitForLog((l) => l.msg === 'queen-edge listening');
    process.kill(edge.pid, 'SIGTERM');
    expect(await edge.exited).toEqual({ code: 0, signal: null });
    expect(edge.lines.map((l) => l.msg)).toEqual(expect.arrayContaining(['draining', 'drained']));
  });

  it('a second signal exits at once instead of waiting out a parked poll', async () => {
    const b = await broker();
    const drainTimeoutMs = 15000;
    const edge = await start(edgeConfig(b.url, { workers: 1, drainTimeoutMs }));
    const listening = await edge.waitForLog((l) => l.msg === 'queen-edge listening');
    const port = (listening.https as { port: number }).port;
    const agent = new Agent({ connect: { rejectUnauthorized: false } });
    cleanups.push(() => agent.destroy());
    const poll = request(`https://127.0.0.1:${port}/api/v1/pop/queue/q?wait=true&timeout=30000`, {
      dispatcher: agent,
      headers: { host: 'acme.localhost', authorization: `Bearer ${await token({ roles: ['read-write'], tenant: 'acme' })}` },
    }).catch(() => null);
    await waitFor(() => b.parked() === 1, 5000, 'the parked poll');
    process.kill(edge.pid, 'SIGTERM');
    await edge.waitForLog((l) => l.msg === 'draining');
    const second = Date.now();
    process.kill(edge.pid, 'SIGINT');
    expect(await edge.exited).toEqual({ code: 1, signal: null });
    // Well before the drain would have ended on its own.
    expect(Date.now() - second).toBeLessThan(drainTimeoutMs / 2);
    expect(edge.lines.some((l) => l.msg === 'second signal: exiting without finishing the drain')).toBe(true);
    await poll;
  });
});

describe('cluster startup failure', () => {
  let blocker: Server | null = null;
  afterEach(async () => {
    await new Promise((r) => (blocker ? blocker.close(r) : r(undefined)));
    blocker = null;
  });

  it('workers that cannot bind their port make the primary exit 1 instead of restarting them forever', async () => {
    const b = await broker();
    const port = await freePort();
    blocker = createServer();
    await new Promise<void>((r) => blocker!.listen({ host: '127.0.0.1', port }, r));
    const edge = await start(
      edgeConfig(b.url, { workers: 2, https: { host: '127.0.0.1', port } }, { redis: { url: SHARED_REDIS_URL, keyPrefix: uniquePrefix() } }),
    );
    expect(await edge.exited).toEqual({ code: 1, signal: null });
    expect(edge.lines.some((l) => l.msg === 'worker failed to start: stopping')).toBe(true);
    expect(edge.lines.some((l) => l.msg === 'worker died: replacing it')).toBe(false);
  });
});
