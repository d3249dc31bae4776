/**
 * Two proxy instances on one real Redis Cluster: usage of tenants whose keys live on different
 * masters, admin API writes reaching both instances through cluster pub/sub, and the parked-poll
 * cap shared across instances with its slots given back.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster } from 'ioredis';
import { request } from 'undici';
import { parkedKey, usageDayKey } from '../../src/redis/keys.js';
import { dayId } from '../../src/metering/counts.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

const TENANTS = ['acme', 'beta', 'gamma', 'delta', 'eps', 'zeta'];
const prefix = uniquePrefix();
let cluster: RedisCluster;
let client: Cluster;
let broker: BrokerDouble;
let a: EdgeHarness;
let b: EdgeHarness;

beforeAll(async () => {
  cluster = await RedisCluster.start();
  client = await cluster.client();
  broker = await startBrokerDouble({ name: 'b1' });
  // One broker double for all: declared tenancy-aware, as a shared broker must be.
  const tenants = Object.fromEntries(
    TENANTS.map((id) => [id, { plan: 'test', hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true, cors: { origins: [] } }]),
  );
  const config = testConfig([broker.url], {
    // Generous: a loaded CI machine must not trip the breaker and test fail modes instead.
    redis: { url: null, cluster: cluster.seeds, keyPrefix: prefix, timeoutMs: 1000 },
    server: { admin: { token: ADMIN_TOKEN } },
    plans: { test: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, parkedPolls: 2 } } },
    tenants,
  });
  a = await startEdge(config);
  b = await startEdge(config);
}, 40_000);

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await broker?.close();
  await cluster?.stop();
});

const tokens = new Map<string, string>();
async function as(id: string): Promise<{ token: string; host: string }> {
  if (!tokens.has(id)) tokens.set(id, await token({ roles: ['read-write'], tenant: id }));
  return { token: tokens.get(id)!, host: `${id}.localhost` };
}

describe('edge on a Redis Cluster', () => {
  it('meters tenants whose usage lives on different masters, each request counted once', async () => {
    const owners = new Set<number>();
    for (const id of TENANTS) owners.add(await cluster.masterOf(usageDayKey(prefix, id, dayId(Date.now()))));
    expect(owners.size).toBeGreaterThanOrEqual(2);
    const sent = new Map<string, { requests: number; pushed: number }>();
    for (let round = 0; round < 4; round++) {
      await Promise.all(
        TENANTS.map(async (id, i) => {
          const r = await call((round + i) % 2 ? a : b, 'POST', '/api/v1/push', {
            ...(await as(id)),
            body: { items: Array.from({ length: i + 1 }, (_, n) => ({ queue: 'q', payload: n })) },
          });
          expect(r.status).toBe(201);
          const s = sent.get(id) ?? { requests: 0, pushed: 0 };
          sent.set(id, { requests: s.requests + 1, pushed: s.pushed + i + 1 });
        }),
      );
    }
    for (const id of TENANTS) {
      await waitFor(
        async () => (await admin(a, 'GET', `/admin/v1/tenants/${id}/usage?granularity=month`)).json?.total?.requests === sent.get(id)!.requests,
        5000,
        `usage of ${id} flushed by both instances`,
      );
      const total = (await admin(b, 'GET', `/admin/v1/tenants/${id}/usage?granularity=month`)).json.total;
      expect({ id, requests: total.requests, pushed: total.messagesPushed }).toEqual({ id, ...sent.get(id)! });
    }
  });

  it('admin API writes on one instance reach the other through cluster pub/sub within a second', async () => {
    const who = await as('beta');
    const pop = (h: EdgeHarness): Promise<Reply> => call(h, 'GET', '/api/v1/pop/queue/empty', who);
    expect((await pop(b)).headers['ratelimit-policy']).toBe('"requests";q=100000;w=1');
    const plan = { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, parkedPolls: 2, requestsPerSec: 1000, requestBurst: 5000 } };
    expect((await admin(a, 'PUT', '/admin/v1/plans/test', { body: plan })).status).toBe(200);
    await waitFor(async () => (await pop(b)).headers['ratelimit-policy'] === '"requests";q=5000;w=5', 3000, 'the plan on the other instance');

    expect((await admin(a, 'POST', '/admin/v1/tenants/beta/suspend')).status).toBe(200);
    const start = Date.now();
    await waitFor(async () => (await pop(b)).status === 403, 3000, 'the suspension on the other instance');
    expect(Date.now() - start).toBeLessThan(1000);
    expect((await admin(b, 'POST', '/admin/v1/tenants/beta/resume')).status).toBe(200);
    await waitFor(async () => (await pop(a)).status !== 403, 3000, 'the resume on the first instance');
  });

  it('holds the parked-poll cap across instances and gives every slot back', async () => {
    const who = await as('gamma');
    const slots = (): Promise<number> => client.zcard(parkedKey(prefix, 'gamma'));
    /** A wait=true pop the test can abort; resolves to the status (0 when aborted). */
    const park = (h: EdgeHarness, signal?: AbortSignal): Promise<number> =>
      request(`${h.url}/api/v1/pop/queue/park?wait=true&timeout=20000`, {
        headers: { host: who.host, authorization: `Bearer ${who.token}` },
        dispatcher: h.dispatcher,
        signal,
      }).then(
        async (r) => {
          await r.body.text();
          return r.statusCode;
        },
        () => 0,
      );
    const abort = new AbortController();
    const first = park(a);
    await waitFor(() => broker.parked() === 1, 5000, 'first poll parked');
    const second = park(b, abort.signal);
    await waitFor(() => broker.parked() === 2, 5000, 'second poll parked');
    expect(await slots()).toBe(2);
    for (const h of [a, b]) {
      const third = await call(h, 'GET', '/api/v1/pop/queue/park?wait=true&timeout=20000', who);
      expect([third.status, (third.json as { code?: string }).code]).toEqual([429, 'rate_limited']);
    }
    // A push answers one parked pop, a client abort ends the other: both slots come back.
    expect((await call(b, 'POST', '/api/v1/push', { ...who, body: { items: [{ queue: 'park', payload: 1 }] } })).status).toBe(201);
    expect(await first).toBe(200);
    await waitFor(async () => (await slots()) === 1, 3000, "the answered poll's slot");
    abort.abort();
    expect(await second).toBe(0);
    await waitFor(async () => (await slots()) === 0, 3000, "the aborted poll's slot");
  });
});
