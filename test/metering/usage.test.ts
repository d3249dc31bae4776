/**
 * Metering end to end: two proxy instances sharing Redis and a key prefix, in front
 * of one broker double; usage read back through the admin API.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, usageSettled } from '../admin/admin-call.js';

const prefix = uniquePrefix();
let broker: BrokerDouble;
let a: EdgeHarness;
let b: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  const config = testConfig([broker.url], { redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 200 }, server: { admin: { token: ADMIN_TOKEN } } });
  a = await startEdge(config);
  b = await startEdge(config);
});

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await broker?.close();
  const r = await connectTest(SHARED_REDIS_URL);
  await flushPrefix(r, prefix);
  r.disconnect();
});

const bytes = (s: string) => Buffer.byteLength(s);

describe('usage across two instances', () => {
  it('counts 301 pushed (one duplicate, one in a transaction), 252 delivered, 252 acks (two in a transaction), the bytes and a refusal, exactly once', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    let ingress = 0;
    let egress = 0;
    let requests = 0;
    const send = async (h: EdgeHarness, method: 'GET' | 'POST', path: string, body?: unknown) => {
      const r = await call(h, method, path, { token: tok, ...(body === undefined ? {} : { body }) });
      requests++;
      if (body !== undefined) ingress += bytes(JSON.stringify(body));
      return r;
    };

    // 3 × 100 items; the last item of the third batch repeats a transactionId of the first.
    for (let batch = 0; batch < 3; batch++) {
      const items = Array.from({ length: 100 }, (_, i) => ({
        queue: 'orders',
        transactionId: batch === 2 && i === 99 ? 'tx-0-0' : `tx-${batch}-${i}`,
        payload: { n: i },
      }));
      const r = await send(batch % 2 === 0 ? a : b, 'POST', '/api/v1/push', { items });
      expect(r.status).toBe(201);
      egress += bytes(r.text);
    }
    // 250 messages in two pops, one per instance, each acked through the other instance.
    for (const [pops, acks] of [
      [a, b],
      [b, a],
    ] as const) {
      const p = await send(pops, 'GET', '/api/v1/pop/queue/orders?batch=125');
      expect(p.status).toBe(200);
      egress += bytes(p.text);
      const msgs = (p.json as { messages: Array<{ transactionId: string; partitionId: string; leaseId: string }> }).messages;
      expect(msgs).toHaveLength(125);
      const ack = await send(acks, 'POST', '/api/v1/ack/batch', {
        acknowledgments: msgs.map((m) => ({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' })),
      });
      expect(ack.status).toBe(200);
      egress += bytes(ack.text);
    }
    // Two more delivered, then acked by a transaction that also pushes one: its acks are acks.
    const p = await send(a, 'GET', '/api/v1/pop/queue/orders?batch=2');
    expect(p.status).toBe(200);
    egress += bytes(p.text);
    const popped = (p.json as { messages: Array<{ transactionId: string; partitionId: string; leaseId: string }> }).messages;
    expect(popped).toHaveLength(2);
    const tx = await send(b, 'POST', '/api/v1/transaction', {
      operations: [
        ...popped.map((m) => ({ type: 'ack', transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' })),
        { type: 'push', items: [{ queue: 'orders', transactionId: 'tx-in-transaction', payload: { n: 0 } }] },
      ],
    });
    expect(tx.status).toBe(200);
    egress += bytes(tx.text);
    // One refusal the tenant is metered for: kv is not in the test plan.
    expect((await send(a, 'GET', '/api/v1/kv/x')).status).toBe(403);

    let usage: any;
    await waitFor(
      async () => {
        usage = (await admin(b, 'GET', '/admin/v1/tenants/acme/usage?granularity=hour')).json;
        return usage?.total?.requests === requests;
      },
      5000,
      'both instances flushed',
    );
    expect(usage.total).toEqual({
      requests,
      messagesPushed: 301,
      messagesDelivered: 252,
      acks: 252,
      ingressBytes: ingress,
      egressBytes: egress,
      refusals: { feature_gated: 1 },
    });
    // Later flushes add nothing: every batch was applied once. Both instances have nothing left to flush, so this total is final.
    await waitFor(async () => (await usageSettled(a)) && (await usageSettled(b)), 5000, 'both instances flushed');
    expect((await admin(a, 'GET', '/admin/v1/tenants/acme/usage?granularity=month')).json.total).toEqual(usage.total);
    expect(usage.buckets.length).toBeGreaterThanOrEqual(1);
  });
});
