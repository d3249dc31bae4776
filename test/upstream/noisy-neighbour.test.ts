/**
 * A shared broker stays fair (docs/clusters.md, "Sharing a broker"): a tenant that keeps as many
 * slow requests and parked polls running as its plan allows (its share of the pool, 2 of 8
 * connections here; the rest wait in its own queue) does not take the broker's connection pool
 * from a co-tenant, and one whose requests time out or get 500s does not get the broker
 * marked down for it. Every tenant here lists the same broker double: acme is the victim, evil
 * sends slow reads and parked polls, rude sends reads the broker answers 500.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { readReply, startEdge, testConfig, TEST_PLAN, token, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

const SLOW_LOOPS = 8;
const PARKED_POLLS = 4;
/**
 * A push takes a few ms alone. The edge, the broker and every client share one process on a busy
 * machine here, so the bound is generous; a push queued behind slow reads waits far longer.
 */
const PUSH_BOUND_MS = 2000;
const PUSHES = 100;

const harness: { broker?: BrokerDouble; edge?: EdgeHarness } = {};

afterEach(async () => {
  await harness.edge?.close();
  await harness.broker?.close();
});

/** A broker double on which status reads hang and consumer-group reads get 500, and an edge with acme, evil and rude on it. */
async function start(upstream: Record<string, unknown>): Promise<{ broker: BrokerDouble; edge: EdgeHarness }> {
  const broker = await startBrokerDouble();
  harness.broker = broker;
  // Queries that outlive the upstream timeout, and reads the broker answers 500 (as it answers SQL
  // errors caused by a request's input): the broker itself is well.
  broker.faultWhen((r) => (r.path === '/api/v1/status/queues' ? 'hang' : r.path === '/api/v1/consumer-groups' ? { status: 500 } : null));
  const edge = await startEdge(
    testConfig([broker.url], {
      server: { admin: { token: ADMIN_TOKEN } },
      upstream: { connections: 8, healthIntervalMs: 500, downAfter: 2, upAfter: 1, ...upstream },
      plans: { small: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 500, requestBurst: 100, parkedPolls: PARKED_POLLS } } },
      // One broker shared by the file's acme (the victim) and both attackers: declared tenancy-aware.
      tenants: {
        acme: { tenancyAwareBrokers: true },
        evil: { plan: 'small', hosts: ['evil.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
        rude: { plan: 'small', hosts: ['rude.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
      },
    }),
  );
  harness.edge = edge;
  await broker.waitForRequests(1, (r) => r.path === '/health');
  return { broker, edge };
}

/** Requests `path` as `tenant` in a loop until `stop` aborts, the one running included; counts answers by status. */
async function loop(edge: EdgeHarness, tenant: string, path: string, stop: AbortSignal, seen: Map<number, number>): Promise<void> {
  const headers = { host: `${tenant}.localhost`, authorization: `Bearer ${await token({ roles: ['read-write'], tenant })}` };
  while (!stop.aborted) {
    const r = await request(`${edge.url}${path}`, { headers, dispatcher: edge.dispatcher, signal: stop }).then(readReply, () => null);
    if (r === null) return;
    seen.set(r.status, (seen.get(r.status) ?? 0) + 1);
    // A pause after quick answers keeps the loops from spinning the one process the test runs in.
    if (r.status !== 504 && r.status !== 204) await new Promise((resolve) => setTimeout(resolve, r.status === 429 ? 100 : 20));
  }
}

interface Push {
  status: number;
  ms: number;
}

/** acme's producers, their connections to the edge opened before any attack starts. */
async function victim(edge: EdgeHarness): Promise<{ produce(done: (pushes: Push[]) => boolean): Promise<Push[]> }> {
  const auth = `Bearer ${await token({ roles: ['read-write'], tenant: 'acme' })}`;
  const one = async (payload: number): Promise<Reply | null> =>
    request(`${edge.url}/api/v1/push`, {
      method: 'POST',
      headers: { host: 'acme.localhost', authorization: auth, 'content-type': 'application/json' },
      body: JSON.stringify({ items: [{ queue: 'victim', payload }] }),
      dispatcher: edge.dispatcher,
      signal: AbortSignal.timeout(PUSH_BOUND_MS),
    }).then(readReply, () => null);
  expect((await Promise.all([one(-1), one(-1)])).map((r) => r?.status)).toEqual([201, 201]);
  return {
    /**
     * Two producers push, each every 10 ms, until `done` (at least PUSHES pushes), or until two
     * pushes failed, which already puts 99 % out of reach. A push not answered within
     * PUSH_BOUND_MS is given up as status 0.
     */
    async produce(done) {
      const pushes: Push[] = [];
      const failed = () => pushes.filter((p) => p.status !== 201 || p.ms >= PUSH_BOUND_MS).length;
      const producer = async (): Promise<void> => {
        while ((pushes.length < PUSHES || !done(pushes)) && failed() < 2) {
          const started = performance.now();
          const r = await one(pushes.length);
          pushes.push({ status: r?.status ?? 0, ms: performance.now() - started });
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      };
      await Promise.all([producer(), producer()]);
      return pushes;
    },
  };
}

function expectFair(pushes: Push[]): void {
  const good = pushes.filter((p) => p.status === 201 && p.ms < PUSH_BOUND_MS).length;
  const statuses: Record<number, number> = {};
  for (const p of pushes) statuses[p.status] = (statuses[p.status] ?? 0) + 1;
  expect(good / pushes.length, JSON.stringify({ statuses, slowest: Math.max(...pushes.map((p) => p.ms)) })).toBeGreaterThanOrEqual(0.99);
}

async function acmeBroker(edge: EdgeHarness): Promise<{ healthy: boolean; lastChange: unknown }> {
  return (await admin(edge, 'GET', '/admin/v1/brokers')).json.clusters.find((c: { tenant: string }) => c.tenant === 'acme').brokers[0];
}

describe('a noisy neighbour on a shared broker', () => {
  it('slow reads and parked polls up to the plan: ≥ 99 % of a co-tenant’s pushes succeed within the bound', async () => {
    // The slow reads never time out during the test: without a share they would hold every connection.
    const { broker, edge } = await start({ requestTimeoutMs: 20_000 });
    const acme = await victim(edge);
    const stop = new AbortController();
    const seen = new Map<number, number>();
    const attack = [
      ...Array.from({ length: SLOW_LOOPS }, () => loop(edge, 'evil', '/api/v1/status/queues', stop.signal, seen)),
      ...Array.from({ length: PARKED_POLLS }, () => loop(edge, 'evil', '/api/v1/pop/queue/idle?wait=true&timeout=800', stop.signal, seen)),
    ];
    // The attack is under way: evil holds its share of slow reads and its parked polls.
    await broker.waitForRequests(2, (r) => r.path === '/api/v1/status/queues');
    await broker.waitForRequests(PARKED_POLLS, (r) => r.path === '/api/v1/pop/queue/idle');
    const pushes = await acme.produce(() => true);
    // evil's other slow reads waited at the edge for its places: the broker never had more than its share.
    const slowAtBroker = broker.requests.filter((r) => r.path === '/api/v1/status/queues').length;
    stop.abort();
    await Promise.all(attack);
    expectFair(pushes);
    expect(slowAtBroker).toBe(2);
  });

  it('reads that time out or get 500: ≥ 99 % of a co-tenant’s pushes succeed, and the broker stays up', async () => {
    const { edge } = await start({ requestTimeoutMs: 300 });
    const acme = await victim(edge);
    const stop = new AbortController();
    const seen = new Map<number, number>();
    const attack = [
      ...Array.from({ length: SLOW_LOOPS }, () => loop(edge, 'evil', '/api/v1/status/queues', stop.signal, seen)),
      loop(edge, 'rude', '/api/v1/consumer-groups', stop.signal, seen),
    ];
    // Pushes until evil's reads timed out in two waves at least, and rude got 500s.
    const pushes = await acme.produce(() => (seen.get(504) ?? 0) >= 4 && (seen.get(500) ?? 0) >= 4);
    stop.abort();
    await Promise.all(attack);
    expectFair(pushes);
    expect(await acmeBroker(edge)).toMatchObject({ healthy: true, lastChange: null });
  });
});
