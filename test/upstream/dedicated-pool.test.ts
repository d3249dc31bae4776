/**
 * The pool share is for shared brokers: a tenant on a broker of its own (the default, without
 * `tenancyAwareBrokers`) may have the whole request pool in flight; a tenancy-aware tenant, whose
 * brokers may be shared, is held to its share (docs/clusters.md, "Sharing a broker").
 */
import { afterEach, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

const harness: { broker?: BrokerDouble; edge?: EdgeHarness } = {};
afterEach(async () => {
  await harness.edge?.close();
  await harness.broker?.close();
});

const HELD = '/api/v1/status/queues';

/** Three reads the broker never answers, at a share of one request in flight; how many reached the broker before the first timed out. */
async function inFlight(tenancyAwareBrokers: boolean): Promise<number> {
  const broker = await startBrokerDouble();
  harness.broker = broker;
  broker.faultWhen((r) => (r.path === HELD ? 'hang' : null));
  const edge = await startEdge(
    testConfig([broker.url], { upstream: { connections: 4, tenantShare: 0.25, requestTimeoutMs: 3000 }, tenants: { acme: { tenancyAwareBrokers } } }),
  );
  harness.edge = edge;
  const jwt = await token({ roles: ['read-write'], tenant: 'acme' });
  const answers = [0, 1, 2].map(() => call(edge, 'GET', HELD, { token: jwt }));
  // A queued read is sent only once one in flight ends (at the 3 s timeout): before it, the
  // broker sees only what the share let through. The first read's arrival says the edge is sending.
  await broker.waitForRequests(1, (r) => r.path === HELD);
  const reached = await broker
    .waitForRequests(3, (r) => r.path === HELD, 1500)
    .then(
      (r) => r.length,
      () => broker.requests.filter((r) => r.path === HELD).length,
    );
  await Promise.all(answers);
  return reached;
}

it('a tenant on dedicated brokers has the whole pool', async () => {
  expect(await inFlight(false)).toBe(3);
}, 20_000);

it('a tenancy-aware tenant has its share (one of four connections here)', async () => {
  expect(await inFlight(true)).toBe(1);
}, 20_000);
