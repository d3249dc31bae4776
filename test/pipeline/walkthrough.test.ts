/**
 * The seed's walkthrough (steps 1-7) through queen-edge over HTTPS with tokens: everything the
 * seed promises a client still holds through the proxy.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { rawTls } from '../helpers/raw.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let rw: string;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  edge = await startEdge(testConfig([broker.url]));
  rw = await token({ roles: ['read-write'], tenant: 'acme', sub: 'alice' });
});
afterAll(async () => {
  await edge.close();
  await broker.close();
});

describe('seed walkthrough through the edge', () => {
  let leaseId = '';
  let partitionId = '';

  it("1. /health is public and reports the brokers' health", async () => {
    const r = await call(edge, 'GET', '/health');
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ status: 'healthy' });
  });

  it('2. push two messages: 201 with per-item statuses in order', async () => {
    const r = await call(edge, 'POST', '/api/v1/push', {
      token: rw,
      body: {
        items: [
          { queue: 'demo', partition: 'acct-42', transactionId: 'evt-1', payload: { n: 1 } },
          { queue: 'demo', partition: 'acct-42', transactionId: 'evt-2', payload: { n: 2 } },
        ],
      },
    });
    expect(r.status).toBe(201);
    expect(r.json).toEqual([
      expect.objectContaining({ index: 0, transaction_id: 'evt-1', queueName: 'demo', status: 'queued' }),
      expect.objectContaining({ index: 1, transaction_id: 'evt-2', queueName: 'demo', status: 'queued' }),
    ]);
  });

  it('3. a repeated push comes back duplicate with the original message_id', async () => {
    const first = broker.requests.find((q) => q.path === '/api/v1/push');
    expect(first).toBeDefined();
    const r = await call(edge, 'POST', '/api/v1/push', {
      token: rw,
      body: { items: [{ queue: 'demo', partition: 'acct-42', transactionId: 'evt-1', payload: { n: 1 } }] },
    });
    expect(r.status).toBe(201);
    const [item] = r.json as { status: string; message_id: string }[];
    expect(item!.status).toBe('duplicate');
    expect(item!.message_id).toMatch(/.+/);
  });

  it('4. long-poll pop leases both messages under one leaseId', async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/demo?consumerGroup=billing&batch=10&wait=true&timeout=5000', { token: rw });
    expect(r.status).toBe(200);
    const body = r.json as {
      success: boolean;
      leaseId: string;
      partitionId: string;
      messages: { transactionId: string; leaseId: string; producerSub: string | null }[];
    };
    expect(body.success).toBe(true);
    expect(body.messages.map((m) => m.transactionId)).toEqual(['evt-1', 'evt-2']);
    expect(new Set(body.messages.map((m) => m.leaseId))).toEqual(new Set([body.leaseId]));
    // passthrough identity: the broker saw the client's token and stamped its sub.
    expect(body.messages[0]!.producerSub).toBe('alice');
    leaseId = body.leaseId;
    partitionId = body.partitionId;
  });

  it('5. ack batch: 200 array, success per item', async () => {
    const r = await call(edge, 'POST', '/api/v1/ack/batch', {
      token: rw,
      body: {
        consumerGroup: 'billing',
        acknowledgments: ['evt-1', 'evt-2'].map((transactionId) => ({ transactionId, partitionId, leaseId, status: 'completed' })),
      },
    });
    expect(r.status).toBe(200);
    expect((r.json as { success: boolean }[]).map((i) => i.success)).toEqual([true, true]);
  });

  it('6. an empty pop is a bodiless 204 (no Content-Length, no bytes) and the connection stays usable', async () => {
    const conn = await rawTls(Number(new URL(edge.url).port));
    try {
      const empty = await conn.exchange(
        `GET /api/v1/pop/queue/demo?consumerGroup=billing&batch=10 HTTP/1.1\r\nHost: acme.localhost\r\nAuthorization: Bearer ${rw}\r\n\r\n`,
      );
      expect(empty.head).toMatch(/^HTTP\/1\.1 204 /);
      expect(empty.head.toLowerCase()).not.toContain('content-length');
      expect(empty.head.toLowerCase()).not.toContain('transfer-encoding');
      expect(empty.rest.length).toBe(0);
      // Nothing trailed the 204 later either: the next answer starts right with its status line.
      const next = await conn.exchange('GET /health HTTP/1.1\r\nHost: acme.localhost\r\n\r\n');
      expect(next.head).toMatch(/^HTTP\/1\.1 200 /);
    } finally {
      conn.close();
    }
  });

  it('7. another consumer group sees both messages again', async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/demo?consumerGroup=analytics&batch=10', { token: rw });
    expect(r.status).toBe(200);
    expect((r.json as { messages: unknown[] }).messages).toHaveLength(2);
  });
});
