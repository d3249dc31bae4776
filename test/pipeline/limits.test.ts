/**
 * Issue 3 through the proxy, on the shared Redis with a private key prefix: request and message
 * rates, parked polls and every way a parked slot is given back, monthly quotas on an injected
 * clock, plan caps, and the in-memory limiter when no Redis is configured.
 */
import type { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { limiterKeys, parkedKey } from '../../src/redis/keys.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { testClock } from '../helpers/clock.js';

/** Generous: on a loaded CI machine the 50 ms default would trip the breaker and test fail modes instead. */
const REDIS_TIMEOUT_MS = 1000;
/** Health probes that a busy machine does not fail (the defaults of testConfig time out at 200 ms). */
const SLOW_MACHINE_HEALTH = { healthIntervalMs: 1000, healthTimeoutMs: 2000, downAfter: 3 };
type Limits = Partial<typeof TEST_PLAN.limits>;
const plan = (limits: Limits, quotas: Partial<typeof TEST_PLAN.quotas> = {}) => ({
  ...TEST_PLAN,
  limits: { ...TEST_PLAN.limits, ...limits },
  quotas: { ...TEST_PLAN.quotas, ...quotas },
});

/** Tenant `id` on plan `id`, host `<id>.localhost`, in front of `brokers`, shared (declared tenancy-aware) with the file's acme. */
function tenantsOf(ids: string[], brokers: string[]) {
  return {
    acme: { tenancyAwareBrokers: true },
    ...Object.fromEntries(ids.map((id) => [id, { plan: id, hosts: [`${id}.localhost`], brokers, tenancyAwareBrokers: true }])),
  };
}

const items = (n: number, queue = 'q') => ({ items: Array.from({ length: n }, (_, i) => ({ queue, payload: { i } })) });

/** A caller bound to one tenant (token claim and host agree). */
async function client(h: EdgeHarness, tenant: string, expiresIn = '10m') {
  const t = await token({ roles: ['read-write'], tenant }, undefined, expiresIn);
  const host = `${tenant}.localhost`;
  return {
    pop: (query = '') => call(h, 'GET', `/api/v1/pop/queue/q${query}`, { token: t, host }),
    push: (n: number, queue = 'q') => call(h, 'POST', '/api/v1/push', { token: t, host, body: items(n, queue) }),
    send: (method: 'GET' | 'POST', path: string, body?: unknown) => call(h, method, path, { token: t, host, body }),
    /** A wait=true pop the test can abort; resolves to the status (0 when aborted). */
    park(query: string, signal?: AbortSignal): Promise<number> {
      return request(`${h.url}/api/v1/pop/queue/${query}`, { headers: { host, authorization: `Bearer ${t}` }, dispatcher: h.dispatcher, signal }).then(
        async (r) => {
          await r.body.text();
          return r.statusCode;
        },
        () => 0,
      );
    },
  };
}

function expectRateLimited(r: Reply, retryAfter: number): void {
  expect(r.status).toBe(429);
  expect(r.json).toEqual({ error: expect.any(String), code: 'rate_limited' });
  expect(r.headers['retry-after']).toBe(String(retryAfter));
}

describe('limits through the proxy (Redis)', () => {
  const prefix = uniquePrefix();
  let broker: BrokerDouble;
  let parkBroker: BrokerDouble;
  let redis: Redis;
  let edge: EdgeHarness;
  let twin: EdgeHarness;
  /** Both instances' clock. */
  const clock = testClock();
  const stopped = clock.stopped;

  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'main' });
    parkBroker = await startBrokerDouble({ name: 'park' });
    redis = await connectTest(SHARED_REDIS_URL);
    const config = testConfig([broker.url], {
      server: { longPoll: { defaultTimeoutMs: 30000, maxTimeoutMs: 60000, slackMs: 300 } },
      upstream: SLOW_MACHINE_HEALTH,
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: REDIS_TIMEOUT_MS, failMode: 'closed' },
      plans: {
        rate: plan({ requestsPerSec: 1, requestBurst: 4 }),
        slow: plan({ requestsPerSec: 0.25, requestBurst: 2 }),
        shared: plan({ requestsPerSec: 1, requestBurst: 10 }),
        msgs: plan({ messagesPerSec: 50, messageBurst: 300 }),
        txn: plan({ messagesPerSec: 50, messageBurst: 300 }),
        parked: plan({ parkedPolls: 2 }),
        caps: plan({ maxBatch: 10, maxPayloadBytes: 2048 }),
      },
      tenants: {
        ...tenantsOf(['rate', 'slow', 'shared', 'msgs', 'txn', 'caps'], [broker.url]),
        ...tenantsOf(['parked'], [parkBroker.url]),
      },
    });
    edge = await startEdge(config, { clock: clock.now });
    twin = await startEdge(config, { clock: clock.now });
  });
  afterAll(async () => {
    await Promise.all([edge.close(), twin.close()]);
    await Promise.all([broker.close(), parkBroker.close()]);
    await flushPrefix(redis, prefix);
    redis.disconnect();
  });

  it('a burst over requestBurst gets 429 rate_limited with Retry-After, RateLimit headers throughout; it passes again after Retry-After', async () => {
    // Warm the TLS connection on another tenant, so the burst is not spread over a handshake.
    await (await client(edge, 'caps')).pop();
    const c = await client(edge, 'rate');
    const before = forwarded(broker).length;
    await stopped(async () => {
      const passes: Reply[] = [];
      for (let i = 0; i < 4; i++) passes.push(await c.pop());
      for (const r of passes) {
        expect(r.status).toBe(204);
        expect(r.headers['ratelimit-policy']).toBe('"requests";q=4;w=4');
      }
      // Remaining counts down as the burst drains (the clock stands still, so exactly).
      const fields = passes.map((r) => /^"requests";r=(\d+);t=([1-4])$/.exec(String(r.headers.ratelimit)));
      expect(fields.every((f) => f !== null)).toBe(true);
      expect(fields.map((f) => Number(f![1]))).toEqual([3, 2, 1, 0]);

      const refused = await c.pop();
      // 1/s: the next token is at most 1 s away, so the ceiling is 1 s.
      expectRateLimited(refused, 1);
      expect(refused.headers['ratelimit-policy']).toBe('"requests";q=4;w=4');
      expect(refused.headers.ratelimit).toMatch(/^"requests";r=0;t=[1-4]$/);
      expect(forwarded(broker).length).toBe(before + 4);

      clock.advance(Number(refused.headers['retry-after']) * 1000);
      const again = await c.pop();
      expect(again.status).toBe(204);
      expect(again.headers.ratelimit).toMatch(/^"requests";r=\d;t=\d$/);
    });
  });

  it('Retry-After is the ceiling of the wait for the plan (0.25/s: 4 s)', async () => {
    await stopped(async () => {
      const c = await client(edge, 'slow');
      expect((await c.pop()).status).toBe(204);
      expect((await c.pop()).status).toBe(204);
      const refused = await c.pop();
      expectRateLimited(refused, 4);
      expect(refused.headers['ratelimit-policy']).toBe('"requests";q=2;w=8');
    });
  });

  it('two proxy instances on one Redis share one budget', async () => {
    const [a, b] = [await client(edge, 'shared'), await client(twin, 'shared')];
    const started = Date.now();
    const replies = await Promise.all(Array.from({ length: 30 }, (_, i) => (i % 2 === 0 ? a : b).pop()));
    const elapsedSec = (Date.now() - started) / 1000;
    const admitted = replies.filter((r) => r.status === 204).length;
    expect(replies.filter((r) => r.status === 429).length).toBe(30 - admitted);
    // Burst 10 plus at most the refill (1/s) during the run, whichever instance answered.
    expect(admitted).toBeGreaterThanOrEqual(10);
    expect(admitted).toBeLessThanOrEqual(10 + Math.ceil(elapsedSec));
    const served = new Set(replies.filter((r) => r.status === 204).map((r) => r.headers['x-request-id']));
    expect(served.size).toBe(admitted);
  });

  it('pushes of 100 items drain a 300-message burst 100 at a time; the 4th waits for refill', async () => {
    await stopped(async () => {
      const c = await client(edge, 'msgs');
      for (let i = 0; i < 3; i++) expect((await c.push(100)).status).toBe(201);
      const before = forwarded(broker).length;
      const refused = await c.push(100);
      // 50 messages/s: 100 more need just under 2 s.
      expectRateLimited(refused, 2);
      expect(refused.headers['ratelimit-policy']).toBeDefined();
      expect(forwarded(broker).length).toBe(before);
      // Requests without messages still pass: the message bucket is not the request bucket.
      expect((await c.pop()).status).toBe(200);
    });
  });

  it("a transaction's pushed items count against the message rate", async () => {
    await stopped(async () => {
      const c = await client(edge, 'txn');
      const txn = (n: number) => c.send('POST', '/api/v1/transaction', { operations: [{ type: 'push', ...items(n, 'tq') }] });
      for (let i = 0; i < 3; i++) expect((await txn(100)).status).toBe(200);
      expectRateLimited(await txn(100), 2);
      expectRateLimited(await c.push(100), 2);
      // A transaction that pushes nothing costs no messages.
      expect((await c.send('POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [] }] })).status).not.toBe(429);
    });
  });

  it('plan caps: a push over maxBatch and a pop batch over it are 400, a body over maxPayloadBytes 413, none forwarded', async () => {
    const c = await client(edge, 'caps');
    const before = forwarded(broker).length;
    expect((await c.push(11)).json).toEqual({ error: expect.any(String), code: 'invalid_request' });
    expect((await c.pop('?batch=11')).json).toEqual({ error: expect.any(String), code: 'invalid_request' });
    const big = await c.send('POST', '/api/v1/push', { items: [{ queue: 'q', payload: 'x'.repeat(3000) }] });
    expect(big.status).toBe(413);
    expect(big.json).toEqual({ error: expect.any(String), code: 'payload_too_large' });
    expect(forwarded(broker).length).toBe(before);
    expect((await c.push(10)).status).toBe(201);
  });

  describe('parked polls (parkedPolls: 2)', () => {
    const slots = () => redis.zcard(parkedKey(prefix, 'parked'));
    const slotsBackTo = (n: number, what: string) => waitFor(async () => (await slots()) === n, 3000, what);

    it('the 3rd concurrent wait=true pop is refused; a response and a client abort each give a slot back', async () => {
      const c = await client(edge, 'parked');
      const abort = new AbortController();
      const first = c.park('wake?wait=true&timeout=20000');
      await waitFor(() => parkBroker.parked() === 1, 3000, 'first pop parked');
      const second = c.park('wake?wait=true&timeout=20000', abort.signal);
      await waitFor(() => parkBroker.parked() === 2, 3000, 'second pop parked');
      expect(await slots()).toBe(2);

      const before = forwarded(parkBroker).length;
      const third = await c.pop('?wait=true&timeout=20000');
      expectRateLimited(third, 1);
      expect(third.headers.ratelimit).toBeDefined();
      expect(forwarded(parkBroker).length).toBe(before);
      // Not a parked poll: still admitted while the slots are full.
      expect((await c.pop()).status).toBe(204);

      // Response: a push wakes the first parked pop (the edge's push to the same broker).
      expect((await c.send('POST', '/api/v1/push', items(1, 'wake'))).status).toBe(201);
      expect(await first).toBe(200);
      await slotsBackTo(1, 'slot released after the response');

      // Client abort.
      abort.abort();
      expect(await second).toBe(0);
      await waitFor(() => parkBroker.parked() === 0, 3000, 'upstream pop aborted');
      await slotsBackTo(0, 'slot released after the client abort');
    });

    it('an upstream reset on arrival and a broker crash while parked give the slot back', async () => {
      const c = await client(edge, 'parked');
      // Until the pop arrived: a health probe in between must not take the only fault.
      parkBroker.fault('reset');
      const reset = c.park('err?wait=true&timeout=20000');
      await parkBroker.waitForRequests(1, (r) => r.path.endsWith('/err'));
      parkBroker.clearFaults();
      expect(await reset).toBe(502);
      await slotsBackTo(0, 'slot released after a reset');
      await waitFor(async () => (await c.pop()).status === 204, 5000, 'broker healthy again');

      const crashed = c.park('err?wait=true&timeout=20000');
      await waitFor(() => parkBroker.parked() === 1, 3000, 'pop parked');
      expect(await slots()).toBe(1);
      await parkBroker.close();
      expect(await crashed).toBe(502);
      await slotsBackTo(0, 'slot released after the broker crashed');
      await parkBroker.restart();
      await waitFor(async () => (await c.pop()).status === 204, 5000, 'broker healthy again');
    });

    it('a broker long-poll timeout (204) and an edge upstream timeout (504) give the slot back', async () => {
      const c = await client(edge, 'parked');
      expect(await c.park('idle?wait=true&timeout=200')).toBe(204);
      await slotsBackTo(0, 'slot released after the long-poll timeout');

      // The broker never answers: the edge gives up after timeout + slackMs (100 + 300 ms). Until
      // the pop arrived: a health probe in between must not take the only fault.
      parkBroker.fault('hang');
      const hung = c.park('idle?wait=true&timeout=100');
      await parkBroker.waitForRequests(1, (r) => r.path.endsWith('/idle') && r.query.get('timeout') === '100');
      parkBroker.clearFaults();
      expect(await hung).toBe(504);
      await slotsBackTo(0, 'slot released after the upstream timeout');

      // Nothing leaked: two can park again.
      const [a, b] = [c.park('idle?wait=true&timeout=300'), c.park('idle?wait=true&timeout=300')];
      await waitFor(() => parkBroker.parked() === 2, 3000, 'two parked again');
      expect(await Promise.all([a, b])).toEqual([204, 204]);
      await slotsBackTo(0, 'all slots released');
    });
  });
});

describe('monthly quotas through the proxy (injected clock)', () => {
  const prefix = uniquePrefix();
  // Thirty seconds before the new year, running forward at real speed.
  const t0 = Date.now();
  const clock = () => Date.parse('2026-12-31T23:59:30Z') + (Date.now() - t0);
  let broker: BrokerDouble;
  let redis: Redis;
  let edge: EdgeHarness;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    redis = await connectTest(SHARED_REDIS_URL);
    edge = await startEdge(
      testConfig([broker.url], {
        redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: REDIS_TIMEOUT_MS, failMode: 'closed' },
        upstream: SLOW_MACHINE_HEALTH,
        plans: { quota: plan({}, { messagesPerMonth: 250 }), bytes: plan({}, { ingressBytesPerMonth: 1000 }) },
        tenants: tenantsOf(['quota', 'bytes'], [broker.url]),
      }),
      { clock },
    );
  });
  afterAll(async () => {
    await edge.close();
    await broker.close();
    await flushPrefix(redis, prefix);
    redis.disconnect();
  });

  it('messagesPerMonth spent: 429 quota_exceeded with Retry-After = seconds to the next UTC month', async () => {
    // The token must outlive the injected clock, which runs weeks ahead of the real one.
    const c = await client(edge, 'quota', '400d');
    expect((await c.push(100)).status).toBe(201);
    expect((await c.push(100)).status).toBe(201);
    const toNewYear = () => Math.ceil((Date.parse('2027-01-01T00:00:00Z') - clock()) / 1000);
    const upper = toNewYear();
    const refused = await c.push(100);
    const lower = toNewYear();
    expect(refused.status).toBe(429);
    expect(refused.json).toEqual({ error: expect.any(String), code: 'quota_exceeded' });
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(upper);
    expect(Number(refused.headers['retry-after'])).toBeGreaterThanOrEqual(lower);
    expect(refused.headers.ratelimit).toBeDefined();
    // What is left of the quota can still be spent; reads are not metered against it.
    expect((await c.push(50)).status).toBe(201);
    expect((await c.push(1)).json).toMatchObject({ code: 'quota_exceeded' });
    expect((await c.pop()).status).toBe(200);
    expect(await redis.get(limiterKeys(prefix, 'quota', '202612').monthMessages)).toBe('250');
  });

  it('ingressBytesPerMonth counts request body bytes', async () => {
    const c = await client(edge, 'bytes', '400d');
    const body = { items: [{ queue: 'q', payload: 'x'.repeat(550) }] };
    const size = Buffer.byteLength(JSON.stringify(body));
    expect((await c.send('POST', '/api/v1/push', body)).status).toBe(201);
    const refused = await c.send('POST', '/api/v1/push', body);
    expect(refused.json).toMatchObject({ code: 'quota_exceeded' });
    expect(Number(refused.headers['retry-after'])).toBeLessThanOrEqual(30);
    expect(await redis.get(limiterKeys(prefix, 'bytes', '202612').monthBytes)).toBe(String(size));
  });
});

describe('limits without Redis (in memory)', () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    edge = await startEdge(
      testConfig([broker.url], {
        upstream: SLOW_MACHINE_HEALTH,
        plans: { rate: plan({ requestsPerSec: 1, requestBurst: 4, messagesPerSec: 50, messageBurst: 300 }), parked: plan({ parkedPolls: 1 }) },
        tenants: tenantsOf(['rate', 'parked'], [broker.url]),
      }),
    );
  });
  afterAll(async () => {
    await edge.close();
    await broker.close();
  });

  it('request and message bursts are enforced with the same answers', async () => {
    const c = await client(edge, 'rate');
    for (let i = 0; i < 3; i++) expect((await c.push(100)).status).toBe(201);
    expectRateLimited(await c.push(100), 2);
    const last = await c.pop();
    expect(last.status).toBe(200);
    expect(last.headers['ratelimit-policy']).toBe('"requests";q=4;w=4');
    const refused = await c.pop();
    expectRateLimited(refused, 1);
    expect(refused.headers.ratelimit).toMatch(/^"requests";r=0;t=\d$/);
  });

  it('a parked slot is refused while taken and given back when the client aborts', async () => {
    const c = await client(edge, 'parked');
    const abort = new AbortController();
    const parked = c.park('empty?wait=true&timeout=20000', abort.signal);
    await waitFor(() => broker.parked() === 1, 3000, 'pop parked');
    expectRateLimited(await c.pop('?wait=true'), 1);
    abort.abort();
    expect(await parked).toBe(0);
    // Given back: a new parked pop is admitted (and ends by its timeout).
    await waitFor(async () => (await c.park('empty?wait=true&timeout=50')) === 204, 3000, 'the slot given back');
  });
});
