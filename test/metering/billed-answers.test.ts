/**
 * Usage bills what the broker did, read from its answer through a real edge: a transaction the
 * broker rolled back (`200 {"success":false}`, the 0.15 broker's shape) bills nothing; an answer a
 * broker compressed anyway (gzip, deflate, br) is decoded for metering and counted exactly; one in
 * a coding the edge cannot decode is counted from the request, with a warning in the log.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let rw: string;
const captured = capturingLogger('info');

beforeAll(async () => {
  broker = await startBrokerDouble({ answers: { rollbackAs200: true } });
  edge = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } } }), { log: captured.log });
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
});

afterAll(async () => {
  await edge?.close();
  await broker?.close();
});

interface Usage {
  messagesPushed: number;
  messagesDelivered: number;
  acks: number;
  requests: number;
}

async function usage(): Promise<Usage> {
  return (await admin(edge, 'GET', '/admin/v1/tenants/acme/usage?granularity=hour')).json.total as Usage;
}

/** Waits until every request sent so far is metered, then returns the usage. */
async function settled(requests: number): Promise<Usage> {
  let u = await usage();
  await waitFor(
    async () => {
      u = await usage();
      return u.requests >= requests;
    },
    5000,
    `${requests} requests metered`,
  );
  return u;
}

const items = (queue: string, n: number) => Array.from({ length: n }, (_, i) => ({ queue, payload: { i } }));

describe('billing from what the broker answered', () => {
  it('a transaction the broker rolled back bills neither its pushes nor its acks', async () => {
    expect((await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: items('tx', 2) } })).status).toBe(201);
    const pop = await call(edge, 'GET', '/api/v1/pop/queue/tx?batch=2', { token: rw });
    const [m1, m2] = (pop.json as { messages: Array<{ transactionId: string; partitionId: string; leaseId: string }> }).messages;
    // Committed: a push item and an ack.
    const ok = await call(edge, 'POST', '/api/v1/transaction', {
      token: rw,
      body: {
        operations: [
          { type: 'push', items: items('tx-out', 1) },
          { type: 'ack', transactionId: m1!.transactionId, partitionId: m1!.partitionId, leaseId: m1!.leaseId, status: 'completed' },
        ],
      },
    });
    expect(ok.json).toMatchObject({ success: true });
    // Rolled back: three push items and a good ack, then an ack of a lease that does not exist.
    const rolled = await call(edge, 'POST', '/api/v1/transaction', {
      token: rw,
      body: {
        operations: [
          { type: 'push', items: items('tx-out', 3) },
          { type: 'ack', transactionId: m2!.transactionId, partitionId: m2!.partitionId, leaseId: m2!.leaseId, status: 'completed' },
          { type: 'ack', transactionId: m2!.transactionId, partitionId: m2!.partitionId, leaseId: 'no-such-lease', status: 'completed' },
        ],
      },
    });
    expect(rolled.status).toBe(200);
    expect(rolled.json).toMatchObject({ success: false });
    const u = await settled(4);
    expect(u).toMatchObject({ requests: 4, messagesPushed: 2 + 1, messagesDelivered: 2, acks: 1 });
  });

  it('a pop with autoAck=true bills the acks the broker made in it; one without bills none', async () => {
    const before = await usage();
    expect((await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: items('auto', 5) } })).status).toBe(201);
    const auto = await call(edge, 'GET', '/api/v1/pop/queue/auto?batch=3&autoAck=true', { token: rw });
    expect(auto.status).toBe(200);
    expect(auto.json).toMatchObject({ leaseId: null, messages: [{}, {}, {}] });
    const leased = await call(edge, 'GET', '/api/v1/pop/queue/auto?batch=3&autoAck=false', { token: rw });
    expect((leased.json as { messages: unknown[] }).messages).toHaveLength(2);
    const u = await settled(before.requests + 3);
    expect({ delivered: u.messagesDelivered - before.messagesDelivered, acks: u.acks - before.acks }).toEqual({ delivered: 5, acks: 3 });
  });

  it.each(['gzip', 'deflate', 'br'] as const)('an answer compressed with %s is decoded for metering and relayed as sent', async (coding) => {
    const before = await usage();
    broker.setOptions({ answers: { rollbackAs200: true, contentEncoding: coding } });
    try {
      const push = await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: items(`enc-${coding}`, 3) } });
      expect(push.status).toBe(201);
      expect(push.headers['content-encoding']).toBe(coding);
      const pop = await call(edge, 'GET', `/api/v1/pop/queue/enc-${coding}?batch=10`, { token: rw });
      expect(pop.status).toBe(200);
    } finally {
      broker.setOptions({ answers: { rollbackAs200: true } });
    }
    const u = await settled(before.requests + 2);
    expect({ pushed: u.messagesPushed - before.messagesPushed, delivered: u.messagesDelivered - before.messagesDelivered }).toEqual({
      pushed: 3,
      delivered: 3,
    });
  });

  it.each([
    ['x-unknown', 'x-unknown'],
    ['corrupt-gzip', 'gzip'],
  ] as const)('an answer in a coding the edge cannot decode (%s) is metered from the request, and logged', async (coding, label) => {
    const before = await usage();
    const warned = captured.lines.length;
    broker.setOptions({ answers: { rollbackAs200: true, contentEncoding: coding } });
    try {
      const push = await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: items('enc-unknown', 4) } });
      expect(push.status).toBe(201);
      expect(push.headers['content-encoding']).toBe(label);
    } finally {
      broker.setOptions({ answers: { rollbackAs200: true } });
    }
    const u = await settled(before.requests + 1);
    expect(u.messagesPushed - before.messagesPushed).toBe(4);
    expect(captured.lines.slice(warned).some((l) => l.problem === 'undecodable' && l.level === 40)).toBe(true);
  });
});
