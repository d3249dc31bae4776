/**
 * Passive health is keyed on whether a request is a parked poll, not on comparing its timeout
 * with the request timeout: a short `wait=true` poll that runs out of time is no evidence against
 * its broker, while an ordinary request that times out starts a health check, which marks the
 * broker down if it fails too.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(
    testConfig([broker.url], {
      server: { admin: { token: ADMIN_TOKEN }, longPoll: { slackMs: 200 } },
      // One failed check marks a broker down. Besides the one at start, the only checks are those a
      // suspicious failure starts (at most one a second), and a down broker stays down.
      upstream: { downAfter: 1, upAfter: 1000, healthIntervalMs: 4000, healthTimeoutMs: 500, requestTimeoutMs: 1500 },
    }),
  );
  await broker.waitForRequests(1, (r) => r.path === '/health');
});

afterAll(async () => {
  await edge?.close();
  await broker?.close();
});

const healthy = async (): Promise<boolean> => (await admin(edge, 'GET', '/admin/v1/brokers')).json.clusters[0].brokers[0].healthy;

describe('passive health', () => {
  it('a 1-second parked poll that times out leaves its broker up; an ordinary request that times out, with a check that times out too, marks it down', async () => {
    const rw = await token({ roles: ['read-write'], tenant: 'acme' });
    // The poll's edge timeout (1000 + 200 ms slack) is below the request timeout (1500 ms).
    broker.fault('hang', 1);
    const poll = await call(edge, 'GET', '/api/v1/pop/queue/q?wait=true&timeout=1000', { token: rw });
    expect(poll.status).toBe(504);
    expect(await healthy()).toBe(true);

    // The read, then the health check it starts.
    broker.fault('hang', 2);
    const read = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: rw });
    expect(read.status).toBe(504);
    await broker.waitForRequests(2, (r) => r.path === '/health');
    await expect.poll(healthy, { timeout: 5000 }).toBe(false);
  });
});
