/**
 * The limiter against a private redis-server through the proxy: exactly one Redis command per
 * limited request, and the fail modes (open, closed, local) when the server is killed or frozen,
 * with recovery once it is back.
 */
import { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { ADMIT_LUA, HEARTBEAT_LUA, scriptSha } from '../../src/limits/script.js';
import { NO_USAGE } from '../../src/metering/recorder.js';
import { instancesKey, parkedKey } from '../../src/redis/keys.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { commandCalls, connectTest, PrivateRedis, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { capturingLogger } from '../helpers/logs.js';
import { testClock } from '../helpers/clock.js';

/** Long enough that a busy machine's ordinary request stays well under it. */
const TIMEOUT_MS = 1000;
/** Health probes that a busy machine does not fail (the defaults of testConfig time out at 200 ms). */
const SLOW_MACHINE_HEALTH = { healthIntervalMs: 1000, healthTimeoutMs: 2000, downAfter: 3 };

let server: PrivateRedis;
let broker: BrokerDouble;

beforeAll(async () => {
  server = await PrivateRedis.start();
  broker = await startBrokerDouble();
});
afterAll(async () => {
  await broker.close();
  await server.kill();
});

/** Plan limits of 1/s, burst 6, unless `unlimited` (a refusal would be answered from the deny cache). */
function config(failMode: 'open' | 'closed' | 'local', keyPrefix: string, unlimited = false): RawConfig {
  const limits = unlimited ? TEST_PLAN.limits : { ...TEST_PLAN.limits, requestsPerSec: 1, requestBurst: 6 };
  return testConfig([broker.url], {
    redis: { url: server.url, keyPrefix, timeoutMs: TIMEOUT_MS, failMode },
    upstream: SLOW_MACHINE_HEALTH,
    plans: { test: { ...TEST_PLAN, limits } },
    // acme and fresh share the broker double: declared tenancy-aware, as a shared broker must be.
    tenants: { acme: { tenancyAwareBrokers: true }, fresh: { plan: 'test', hosts: ['fresh.localhost'], brokers: [broker.url], tenancyAwareBrokers: true } },
  });
}

/** Log lines an edge wrote, parsed. */
function capture() {
  return capturingLogger('info');
}

const tokens = new Map<string, string>();
async function pop(h: EdgeHarness, tenant = 'acme'): Promise<Reply & { ms: number }> {
  if (!tokens.has(tenant)) tokens.set(tenant, await token({ roles: ['read-write'], tenant }));
  const start = performance.now();
  const r = await call(h, 'GET', '/api/v1/pop/queue/q', { token: tokens.get(tenant)!, host: `${tenant}.localhost` });
  return { ...r, ms: performance.now() - start };
}

async function pops(h: EdgeHarness, n: number, tenant?: string): Promise<(Reply & { ms: number })[]> {
  const out: (Reply & { ms: number })[] = [];
  for (let i = 0; i < n; i++) out.push(await pop(h, tenant));
  return out;
}

describe('Redis commands per limited request', () => {
  it('N limited requests cost exactly N EVALSHA of the admit script and nothing else', async () => {
    // NO_USAGE: metering flushes (one EVAL a second) would land in the counted window.
    const edge = await startEdge(config('closed', uniquePrefix(), true), { usage: NO_USAGE });
    const stats = await connectTest(server.url);
    const monitored = new Redis(server.url);
    const monitor = await monitored.monitor();
    try {
      await pops(edge, 3); // token cache, script cache and connections warm
      const seen: string[][] = [];
      let window: 'before' | 'open' | 'closed' = 'before';
      monitor.on('monitor', (_time: string, args: string[], source: string) => {
        // Commands a script runs show up too, as source "lua": they are no extra round trip.
        if (source === 'lua') return;
        if (args[0]?.toLowerCase() === 'info') window = window === 'before' ? 'open' : 'closed';
        else if (window === 'open') seen.push(args);
      });
      const N = 200;
      const before = await commandCalls(stats);
      const replies = await pops(edge, N);
      const after = await commandCalls(stats);
      await waitFor(() => window === 'closed', 2000, 'the closing INFO in the MONITOR stream');

      expect(replies.every((r) => r.status === 204 && r.headers.ratelimit !== undefined)).toBe(true);
      const admitSha = scriptSha(ADMIT_LUA);
      const heartbeatSha = scriptSha(HEARTBEAT_LUA);
      const isScript = (a: string[]) => ['eval', 'evalsha'].includes(a[0]!.toLowerCase());
      const admits = seen.filter((a) => a[0]!.toLowerCase() === 'evalsha' && a[1] === admitSha);
      // Background work of the instance, per period and not per request: the heartbeat, the
      // directory's safety-net reload, the metering flush (one batch a second) and the read of
      // Redis's epoch key (one GET a second).
      const heartbeats = seen.filter((a) => a[0]!.toLowerCase() === 'evalsha' && a[1] === heartbeatSha);
      const background = seen.filter(
        (a) => heartbeats.includes(a) || a.some((x) => x.includes('{dir}') || x.includes(':ud:') || x.includes(':us:') || x.endsWith(':epoch')),
      );
      const other = seen.filter((a) => !admits.includes(a) && !background.includes(a));
      expect(admits.length).toBe(N);
      expect(other).toEqual([]);
      // INFO commandstats agrees: every script call in the window is one of those seen above.
      const delta = (cmd: string) => (after.get(cmd) ?? 0) - (before.get(cmd) ?? 0);
      expect(delta('evalsha') + delta('eval')).toBe(N + background.filter(isScript).length);
      expect(background.filter(isScript).length).toBeLessThan(N / 10);
    } finally {
      monitor.disconnect();
      monitored.disconnect();
      stats.disconnect();
      await edge.close();
    }
  });
});

describe('parked-slot release during a connection drop', () => {
  it('regression: a release that failed while the connection was down is sent again, not left to expire', async () => {
    const prefix = uniquePrefix();
    const cfg = testConfig([broker.url], {
      redis: { url: server.url, keyPrefix: prefix, timeoutMs: TIMEOUT_MS, failMode: 'closed' },
      upstream: SLOW_MACHINE_HEALTH,
      plans: { test: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, parkedPolls: 1 } } },
    });
    const edge = await startEdge(cfg);
    const admin = await connectTest(server.url);
    try {
      const t = await token({ roles: ['read-write'], tenant: 'acme' });
      const abort = new AbortController();
      const parked = request(`${edge.url}/api/v1/pop/queue/drop?wait=true&timeout=20000`, {
        headers: { host: 'acme.localhost', authorization: `Bearer ${t}` },
        dispatcher: edge.dispatcher,
        signal: abort.signal,
      }).catch(() => null);
      await waitFor(() => broker.parked() === 1, 3000, 'pop parked');
      expect(await admin.zcard(parkedKey(prefix, 'acme'))).toBe(1);
      // Drop the edge's connections (Redis keeps its data), and end the pop while they are down.
      await admin.call('CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes');
      abort.abort();
      await parked;
      // Without the retry the slot would block the tenant's long polls for maxTimeoutMs + 2 × slack.
      await waitFor(async () => (await admin.zcard(parkedKey(prefix, 'acme'))) === 0, 4000, 'the slot released after the reconnect');
    } finally {
      admin.disconnect();
      await edge.close();
    }
  });
});

describe('Redis down and back', () => {
  const logs = { open: capture(), closed: capture(), local: capture() };
  let open: EdgeHarness;
  let closed: EdgeHarness;
  let localA: EdgeHarness;
  let localB: EdgeHarness;
  const localPrefix = uniquePrefix();
  /** Every instance's clock; bursts run with it stopped. */
  const { now: clock, stopped } = testClock();

  beforeAll(async () => {
    [open, closed, localA, localB] = await Promise.all([
      startEdge(config('open', uniquePrefix()), { log: logs.open.log, clock }),
      startEdge(config('closed', uniquePrefix()), { log: logs.closed.log, clock }),
      startEdge(config('local', localPrefix), { log: logs.local.log, clock }),
      startEdge(config('local', localPrefix), { clock }),
    ]);
  });
  afterAll(async () => {
    await server.restart();
    await Promise.all([open, closed, localA, localB].map((h) => h.close()));
  });

  const downLines = (c: ReturnType<typeof capture>) => c.lines.filter((l) => l.msg.includes('Redis unavailable'));
  const backLines = (c: ReturnType<typeof capture>) => c.lines.filter((l) => l.msg.includes('Redis is back'));

  it('killed: open lets through, closed answers 503 limiter_unavailable, local enforces the limit / live instances; none waits on Redis', async () => {
    for (const h of [open, closed, localA, localB]) expect((await pop(h)).headers['ratelimit-policy']).toBe('"requests";q=6;w=6');
    // Both local instances are live, and each has heartbeated since: each has read a live count of 2.
    const probe = await connectTest(server.url, 2000);
    try {
      const key = instancesKey(localPrefix);
      await waitFor(async () => (await probe.zcard(key)) === 2, 5000, 'both local instances live');
      const since = Date.now();
      await waitFor(
        async () => {
          const scores = (await probe.zrange(key, '0', '-1', 'WITHSCORES')).filter((_, i) => i % 2 === 1).map(Number);
          return scores.length === 2 && scores.every((s) => s > since);
        },
        5000,
        'a heartbeat of each local instance after both were live',
      );
    } finally {
      probe.disconnect();
    }
    expect((await fetch(`${closed.adminUrl}/readyz`)).status).toBe(200);

    await server.kill();

    const o = await pops(open, 10);
    expect(o.map((r) => r.status)).toEqual(Array(10).fill(204));
    expect(o.every((r) => r.headers.ratelimit === undefined && r.headers['ratelimit-policy'] === undefined)).toBe(true);

    const c = await pops(closed, 5);
    for (const r of c) {
      expect(r.status).toBe(503);
      expect(r.json).toEqual({ error: expect.any(String), code: 'limiter_unavailable' });
    }
    const ready = await fetch(`${closed.adminUrl}/readyz`);
    expect(ready.status).toBe(503);
    expect(await ready.json()).toMatchObject({ status: 'not_ready', reason: expect.stringContaining('limiter') });

    // Burst 6 over 2 live instances: 3 each, with the local share advertised.
    await stopped(async () => {
      for (const h of [localA, localB]) {
        const l = await pops(h, 4);
        expect(l.map((r) => r.status)).toEqual([204, 204, 204, 429]);
        expect(l[0]!.headers['ratelimit-policy']).toBe('"requests";q=3;w=6');
        expect(l[3]!.json).toMatchObject({ code: 'rate_limited' });
        expect(l[3]!.headers['retry-after']).toBe('2');
      }
    });

    // After the first request of each instance, nothing waits for a Redis timeout.
    for (const batch of [o, c]) for (const r of batch.slice(1)) expect(r.ms).toBeLessThan(TIMEOUT_MS);

    // The change of mode is logged once, not per request.
    expect(downLines(logs.open).map((l) => l.failMode)).toEqual(['open']);
    expect(downLines(logs.closed).map((l) => l.failMode)).toEqual(['closed']);
    expect(downLines(logs.local).map((l) => l.failMode)).toEqual(['local']);
  });

  it('restarted: shared limits apply again without a restart of the proxy', async () => {
    await server.restart();
    for (const h of [open, closed, localA, localB]) {
      await waitFor(async () => (await pop(h)).headers['ratelimit-policy'] === '"requests";q=6;w=6', 6000, 'Redis mode again');
    }
    expect((await fetch(`${closed.adminUrl}/readyz`)).status).toBe(200);
    expect(backLines(logs.closed)).toHaveLength(1);

    // A tenant untouched so far: burst 6 in Redis, shared by the two local instances again.
    await stopped(async () => {
      const a = await pops(localA, 7, 'fresh');
      expect(a.map((r) => r.status)).toEqual([204, 204, 204, 204, 204, 204, 429]);
      expect((await pop(localB, 'fresh')).status).toBe(429);
      for (const h of [open, closed]) expect((await pops(h, 7, 'fresh')).map((r) => r.status)).toEqual([204, 204, 204, 204, 204, 204, 429]);
    });
  });

  it('frozen (commands time out): the first request waits one timeout, the next ones are decided at once', async () => {
    server.pause();
    try {
      const [first, ...rest] = await pops(closed, 6);
      expect(first!.status).toBe(503);
      expect(first!.ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
      for (const r of rest) {
        expect(r.status).toBe(503);
        expect(r.ms).toBeLessThan(TIMEOUT_MS);
      }
    } finally {
      server.resume();
    }
    await waitFor(async () => (await pop(closed)).status === 204, 6000, 'recovery after the freeze');
  });
});

describe('Redis down at boot', () => {
  it('the proxy starts in its fail mode and takes up shared limits once Redis is reachable', async () => {
    await server.kill();
    const edge = await startEdge(config('closed', uniquePrefix()));
    try {
      const r = await pop(edge);
      expect(r.status).toBe(503);
      expect(r.json).toMatchObject({ code: 'limiter_unavailable' });
      await server.restart();
      await waitFor(async () => (await pop(edge)).headers['ratelimit-policy'] === '"requests";q=6;w=6', 6000, 'Redis mode after a late Redis');
    } finally {
      await server.restart();
      await edge.close();
    }
  });
});
