/**
 * Usage flushes through Redis outages: counts are kept while Redis is away and
 * flushed once it is back, and a batch that landed while its reply was lost is not counted twice.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { PrivateRedis, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, metric, usageSettled } from '../admin/admin-call.js';

let broker: BrokerDouble;
let redis: PrivateRedis;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  redis = await PrivateRedis.start();
});

afterAll(async () => {
  await redis?.kill();
  await broker?.close();
});

async function edge(): Promise<EdgeHarness> {
  return startEdge(
    testConfig([broker.url], {
      redis: { url: redis.url, keyPrefix: uniquePrefix(), timeoutMs: 100, failMode: 'local' },
      server: { admin: { token: ADMIN_TOKEN } },
    }),
  );
}

async function pushes(h: EdgeHarness, n: number, tag: string): Promise<void> {
  const tok = await token({ roles: ['read-write'], tenant: 'acme' });
  for (let i = 0; i < n; i++) {
    const r = await call(h, 'POST', '/api/v1/push', {
      token: tok,
      body: {
        items: [
          { queue: 'q', transactionId: `${tag}-${i}`, payload: i },
          { queue: 'q', transactionId: `${tag}-${i}-b`, payload: i },
        ],
      },
    });
    expect(r.status).toBe(201);
  }
}

const flushFailures = (h: EdgeHarness) => metric(h, 'queen_edge_metering_flush_failures_total');

async function total(h: EdgeHarness): Promise<{ requests: number; messagesPushed: number } | undefined> {
  const r = await admin(h, 'GET', '/admin/v1/tenants/acme/usage');
  return r.status === 200 ? r.json.total : undefined;
}

describe('usage flush through Redis outages', () => {
  it('killed: counts made while Redis is down are flushed after its restart, exactly', async () => {
    const h = await edge();
    try {
      await redis.kill();
      await pushes(h, 10, 'kill');
      await waitFor(async () => (await flushFailures(h)) >= 1, 3000, 'a failed flush');
      await pushes(h, 5, 'kill2');
      await redis.restart();
      await waitFor(async () => (await total(h))?.requests === 15, 5000, 'the kept counts flushed');
      expect(await total(h)).toMatchObject({ requests: 15, messagesPushed: 30 });
    } finally {
      await h.close();
    }
  });

  it('frozen during a flush: the batch that landed unacknowledged is retried and skipped, not counted twice', async () => {
    const h = await edge();
    try {
      await pushes(h, 4, 'warm');
      await waitFor(async () => (await total(h))?.requests === 4, 3000, 'the first flush');
      const failuresBefore = await flushFailures(h);
      await pushes(h, 6, 'frozen');
      // Freeze Redis: the next flush is sent, times out (2 s), and is queued in Redis' socket.
      redis.pause();
      await waitFor(async () => (await flushFailures(h)) > failuresBefore, 6000, 'a timed-out flush');
      redis.resume();
      // Redis now runs the queued batch; the meter retries the same sequence number, which is skipped.
      await waitFor(async () => (await total(h))?.requests === 10, 5000, 'the landed batch');
      // The retry of that batch has been acknowledged (skipped) once nothing is left to flush; only then is "not twice" a fact.
      await waitFor(() => usageSettled(h), 5000, 'the retried flush acknowledged');
      expect(await total(h)).toMatchObject({ requests: 10, messagesPushed: 20 });
    } finally {
      redis.resume();
      await h.close();
    }
  });
});
