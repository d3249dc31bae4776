/**
 * What the edge answers itself because broker 0.15.1 would answer it in HTML or not at all
 * (docs/reference.md, "Broker"): routes the tenant's brokers do not register, an empty ack batch,
 * an empty transaction. Registered routes and non-empty batches are forwarded as before.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';

describe('answers the edge makes for broker 0.15.1', () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  let acme: string;
  let globex: string;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    edge = await startEdge(
      testConfig([broker.url], {
        // Short, so the broker's silence on an empty batch shows as a quick 504 without the edge's answer.
        upstream: { requestTimeoutMs: 1000 },
        plans: { test: { ...TEST_PLAN, features: ['kv'] } },
        tenants: {
          // acme: the default brokerVersion, 0.15.1. globex: brokers of the whole contract (the double).
          globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [broker.url], tenancyAwareBrokers: true, brokerVersion: 'contract' },
          acme: { tenancyAwareBrokers: true },
        },
      }),
    );
    acme = await token({ roles: ['read-write'], tenant: 'acme' });
    globex = await token({ roles: ['read-write'], tenant: 'globex' });
  });
  afterAll(async () => {
    await edge?.close();
    await broker?.close();
  });

  it.each([
    ['GET', '/api/v1/pop?namespace=shop&task=bill'],
    ['GET', '/api/v1/kv/k1'],
    ['POST', '/api/v1/dlq/d1/replay'],
  ] as const)('%s %s, which broker 0.15.1 does not register, is a JSON 404 route_not_found from the edge, not forwarded', async (method, path) => {
    const before = forwarded(broker).length;
    const r = await call(edge, method, path, { token: acme, ...(method === 'POST' ? { body: {} } : {}) });
    expect(r.status).toBe(404);
    expect(r.headers['content-type']).toBe('application/json');
    expect(r.json).toEqual({ error: 'route not registered by broker 0.15.1', code: 'route_not_found' });
    expect(forwarded(broker).length).toBe(before);
  });

  it('a registered route is forwarded as before; an unregistered one is forwarded for a tenant whose brokers register it', async () => {
    const before = forwarded(broker).length;
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q?wait=false', { token: acme })).status).toBe(204);
    const byNamespace = await call(edge, 'GET', '/api/v1/pop?namespace=shop&wait=false', { token: globex, host: 'globex.localhost' });
    expect(byNamespace.status).toBe(204);
    expect(
      forwarded(broker)
        .map((r) => r.path)
        .slice(before),
    ).toEqual(['/api/v1/pop/queue/q', '/api/v1/pop']);
  });

  it('an ack batch of no acknowledgements is answered 200 [] by the edge: the broker, which never answers it, is not asked', async () => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'POST', '/api/v1/ack/batch', { token: acme, body: { consumerGroup: 'billing', acknowledgments: [] } });
    expect([r.status, r.headers['content-type'], r.text]).toEqual([200, 'application/json', '[]']);
    expect(forwarded(broker).length).toBe(before);
  });

  it('an ack batch with acknowledgements is forwarded and answered by the broker, item by item', async () => {
    const before = forwarded(broker).length;
    const ack = { transactionId: 't-unknown', partitionId: 'p-unknown', leaseId: 'l-unknown', status: 'completed' };
    const r = await call(edge, 'POST', '/api/v1/ack/batch', { token: acme, body: { acknowledgments: [ack] } });
    expect(r.status).toBe(200);
    expect(r.json).toEqual([expect.objectContaining({ index: 0, success: false })]);
    expect(forwarded(broker).length).toBe(before + 1);
  });

  it('a single ack with an empty acknowledgments list is not answered as a batch: the broker judges it', async () => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'POST', '/api/v1/ack', { token: acme, body: { acknowledgments: [] } });
    expect(r.text).not.toBe('[]');
    expect(forwarded(broker).length).toBe(before + 1);
  });

  it('a transaction of no operations is refused 400 invalid_request by the edge, as the broker refuses it, and not forwarded', async () => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'POST', '/api/v1/transaction', { token: acme, body: { operations: [] } });
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ error: 'operations array cannot be empty', code: 'invalid_request' });
    expect(forwarded(broker).length).toBe(before);
  });
});
