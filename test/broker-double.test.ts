/**
 * The broker double against the seed's contract (seed/using-queen-over-http.md), over real
 * sockets: undici for ordinary calls, a raw net socket where the exact bytes matter.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Agent, request } from 'undici';
import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { startBrokerDouble, type BrokerDouble, type RecordedRequest } from './helpers/broker-double.js';
import { waitFor, waitForValue } from './helpers/wait.js';

const agent = new Agent({ keepAliveTimeout: 1000 });
afterAll(() => agent.close());

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: any;
}

async function call(
  broker: BrokerDouble,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  extra: { headers?: Record<string, string>; signal?: AbortSignal; raw?: string } = {},
): Promise<Answer> {
  const payload = extra.raw ?? (body === undefined ? undefined : JSON.stringify(body));
  const res = await request(broker.url + path, {
    method,
    dispatcher: agent,
    headers: { ...(payload === undefined ? {} : { 'content-type': 'application/json' }), ...extra.headers },
    body: payload,
    signal: extra.signal,
  });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: text === '' ? undefined : JSON.parse(text) };
}

const push = (broker: BrokerDouble, items: unknown[], headers?: Record<string, string>) => call(broker, 'POST', '/api/v1/push', { items }, { headers });
const pop = (broker: BrokerDouble, path: string) => call(broker, 'GET', `/api/v1/pop/queue/${path}`);
const ackBatch = (broker: BrokerDouble, acknowledgments: unknown[], consumerGroup?: string) =>
  call(broker, 'POST', '/api/v1/ack/batch', { consumerGroup, acknowledgments });

/** A message of a pop's answer: the fields these tests read. */
interface PoppedMessage {
  transactionId: string;
  partitionId: string;
  partition: string;
  leaseId: string;
  data: unknown;
  producerSub: string | null;
}

/** One item of a push or ack answer. */
interface ItemResult {
  status?: string;
  success?: boolean;
  error?: string | null;
  noop?: boolean;
  leaseReleased?: boolean;
  dlq?: boolean;
}

/** A pop's answer with messages. */
interface PopAnswer {
  leaseId: string;
  partitionId: string;
  messages: PoppedMessage[];
}

/** An ack item as the batch ack takes it. */
interface AckItem {
  transactionId: string;
  partitionId: string;
  leaseId: string;
  status: string | undefined;
}

/** Acks shaped from a pop's messages. */
function acksFor(popped: { messages: PoppedMessage[] }, statuses: Array<string | undefined>): AckItem[] {
  return popped.messages.map((m, i) => ({
    transactionId: m.transactionId,
    partitionId: m.partitionId,
    leaseId: m.leaseId,
    status: statuses[i],
  }));
}

/** A raw HTTP/1.1 connection: write bytes, read exactly what comes back. */
class RawConnection {
  #received = '';
  private constructor(readonly socket: Socket) {
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => (this.#received += chunk));
  }
  static async open(port: number): Promise<RawConnection> {
    const socket = connect(port, '127.0.0.1');
    await once(socket, 'connect');
    return new RawConnection(socket);
  }
  /**
   * Sends a request and returns what arrived from then until `done` holds. Bytes that arrive later
   * open the next exchange's answer, so a follow-up request shows whether anything trailed.
   */
  async exchange(req: string, done: (s: string) => boolean): Promise<string> {
    const start = this.#received.length;
    this.socket.write(req);
    const since = () => this.#received.slice(start);
    await waitFor(() => done(since()), 5000, `the answer to ${req.split('\r\n')[0]}`);
    return since();
  }
}

const fakeJwt = (claims: object) => `${['{"alg":"none"}', JSON.stringify(claims)].map((s) => Buffer.from(s).toString('base64url')).join('.')}.sig`;

let broker: BrokerDouble;
beforeEach(async () => {
  broker = await startBrokerDouble();
});
afterEach(async () => {
  await broker.close();
});

describe('seed walkthrough, steps 1-7', () => {
  it('pushes, dedups, long-polls, acks, answers a bodiless 204 and keeps cursors per group', async () => {
    // 1. health
    const health = await call(broker, 'GET', '/health');
    expect(health.status).toBe(200);
    expect(health.headers['content-type']).toBe('application/json');
    expect(health.json).toEqual({ status: 'healthy', database: 'connected' });

    // 2. push two
    const pushed = await push(broker, [
      { queue: 'demo', partition: 'acct-42', transactionId: 'evt-1', payload: { n: 1 } },
      { queue: 'demo', partition: 'acct-42', transactionId: 'evt-2', payload: { n: 2 } },
    ]);
    expect(pushed.status).toBe(201);
    expect(pushed.json).toEqual([
      { index: 0, message_id: expect.any(String), transaction_id: 'evt-1', queueName: 'demo', status: 'queued' },
      { index: 1, message_id: expect.any(String), transaction_id: 'evt-2', queueName: 'demo', status: 'queued' },
    ]);

    // 3. duplicate
    const dup = await push(broker, [{ queue: 'demo', partition: 'acct-42', transactionId: 'evt-1', payload: { n: 1 } }]);
    expect(dup.status).toBe(201);
    expect(dup.json).toEqual([{ index: 0, message_id: pushed.json[0].message_id, transaction_id: 'evt-1', queueName: 'demo', status: 'duplicate' }]);

    // 4. long-poll pop for billing
    const popped = await pop(broker, 'demo?consumerGroup=billing&batch=10&wait=true&timeout=5000');
    expect(popped.status).toBe(200);
    const body = popped.json;
    expect(Object.keys(body)).toEqual(['success', 'queue', 'partition', 'partitionId', 'leaseId', 'consumerGroup', 'messages']);
    expect(body).toMatchObject({ success: true, queue: 'demo', partition: 'acct-42', consumerGroup: 'billing' });
    expect(body.messages).toHaveLength(2);
    for (const [i, m] of body.messages.entries()) {
      expect(Object.keys(m)).toEqual([
        'id',
        'transactionId',
        'traceId',
        'data',
        'producerSub',
        'createdAt',
        'partitionId',
        'partition',
        'leaseId',
        'consumerGroup',
      ]);
      expect(m).toEqual({
        id: pushed.json[i].message_id,
        transactionId: `evt-${i + 1}`,
        traceId: null,
        data: { n: i + 1 },
        producerSub: null,
        createdAt: body.messages[0].createdAt,
        partitionId: body.partitionId,
        partition: 'acct-42',
        leaseId: body.leaseId,
        consumerGroup: 'billing',
      });
    }
    expect(new Date(body.messages[0].createdAt).toISOString()).toBe(body.messages[0].createdAt);

    // 5. ack both
    const acked = await ackBatch(broker, acksFor(body, ['completed', 'completed']), 'billing');
    expect(acked.status).toBe(200);
    expect(acked.json).toEqual([
      { index: 0, transactionId: 'evt-1', success: true, error: null, leaseReleased: true, dlq: false, noop: false },
      { index: 1, transactionId: 'evt-2', success: true, error: null, leaseReleased: true, dlq: false, noop: false },
    ]);

    // 6. pop again: 204, no body, no Content-Length, and the connection still works
    const raw = await RawConnection.open(broker.port);
    const empty = await raw.exchange('GET /api/v1/pop/queue/demo?consumerGroup=billing&batch=10 HTTP/1.1\r\nHost: broker\r\n\r\n', (s) =>
      s.includes('\r\n\r\n'),
    );
    expect(empty.startsWith('HTTP/1.1 204 No Content\r\n')).toBe(true);
    expect(empty.toLowerCase()).not.toContain('content-length');
    expect(empty.toLowerCase()).not.toContain('transfer-encoding');
    expect(empty.endsWith('\r\n\r\n')).toBe(true);
    // Nothing trailed the 204: the next answer on the connection starts right with its status line.
    const again = await raw.exchange('GET /health HTTP/1.1\r\nHost: broker\r\n\r\n', (s) => s.includes('connected"}'));
    expect(again.startsWith('HTTP/1.1 200 OK\r\n')).toBe(true);
    raw.socket.destroy();

    // 7. another group sees both
    const analytics = await pop(broker, 'demo?consumerGroup=analytics&batch=10');
    expect(analytics.status).toBe(200);
    expect(analytics.json.messages.map((m: PoppedMessage) => m.transactionId)).toEqual(['evt-1', 'evt-2']);
    expect(analytics.json.leaseId).not.toBe(body.leaseId);
  });
});

describe('push', () => {
  it('defaults the partition, mints transaction ids and collapses duplicates within one request', async () => {
    const res = await push(broker, [
      { queue: 'q', payload: 1 },
      { queue: 'q', transactionId: 't', payload: 2 },
      { queue: 'q', transactionId: 't', payload: 3 },
    ]);
    expect(res.json.map((e: ItemResult) => e.status)).toEqual(['queued', 'queued', 'duplicate']);
    expect(res.json[0].transaction_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(res.json[2].message_id).toBe(res.json[1].message_id);
    const popped = await pop(broker, 'q/partition/Default?batch=10');
    expect(popped.json.messages.map((m: PoppedMessage) => m.data)).toEqual([1, 2]);
  });

  it('answers an empty items array with 201 []', async () => {
    const res = await push(broker, []);
    expect(res.status).toBe(201);
    expect(res.json).toEqual([]);
  });

  it('refuses malformed JSON with the parser message and missing fields with 400, writing nothing', async () => {
    const bad = await call(broker, 'POST', '/api/v1/push', undefined, { raw: '{"items":[' });
    expect(bad.status).toBe(400);
    let parserMessage = '';
    try {
      JSON.parse('{"items":[');
    } catch (err) {
      parserMessage = (err as Error).message;
    }
    expect(bad.json).toEqual({ error: parserMessage });
    const noPayload = await push(broker, [{ queue: 'q', payload: 1 }, { queue: 'q' }]);
    expect(noPayload.status).toBe(400);
    expect(noPayload.json.error).toMatch(/payload/);
    const noQueue = await push(broker, [{ payload: 1 }]);
    expect(noQueue.status).toBe(400);
    expect((await pop(broker, 'q')).status).toBe(204);
  });

  it('answers 200 when pushStatus is 200 (C++ 0.15)', async () => {
    broker.setOptions({ pushStatus: 200 });
    const res = await push(broker, [{ queue: 'q', payload: 1 }]);
    expect(res.status).toBe(200);
    expect(res.json[0].status).toBe('queued');
  });

  it('stamps producerSub from the JWT sub at push time', async () => {
    await push(broker, [{ queue: 'q', payload: 1 }], { authorization: `Bearer ${fakeJwt({ sub: 'producer-7' })}` });
    await push(broker, [{ queue: 'q', payload: 2 }], { authorization: fakeJwt({ sub: 'bare-token' }) });
    const popped = await pop(broker, 'q?batch=10');
    expect(popped.json.messages.map((m: PoppedMessage) => m.producerSub)).toEqual(['producer-7', 'bare-token']);
  });
});

describe('long poll', () => {
  it('parks until a push and wakes with the message', async () => {
    const started = Date.now();
    const pending = pop(broker, 'lp?wait=true&timeout=5000');
    await broker.waitForRequests(1, (r) => r.path === '/api/v1/pop/queue/lp');
    expect(broker.parked()).toBe(1);
    // A shorter poll parked after it times out first: the double's poll timers have run, and this one still waits.
    expect((await pop(broker, 'lp-short?wait=true&timeout=100')).status).toBe(204);
    expect(broker.parked()).toBe(1);
    await push(broker, [{ queue: 'lp', transactionId: 'x', payload: 'hi' }]);
    const res = await pending;
    expect(res.status).toBe(200);
    expect(res.json.messages[0].data).toBe('hi');
    expect(broker.parked()).toBe(0);
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it('answers a bodiless 204 when the timeout expires', async () => {
    const started = Date.now();
    const res = await pop(broker, 'lp?wait=true&timeout=300');
    const elapsed = Date.now() - started;
    expect(res.status).toBe(204);
    expect(res.text).toBe('');
    expect(res.headers['content-length']).toBeUndefined();
    expect(elapsed).toBeGreaterThanOrEqual(280);
    expect(elapsed).toBeLessThan(1500);
    expect(broker.parked()).toBe(0);
  });

  it('uses defaultTimeoutMs when the pop names no timeout', async () => {
    broker.setOptions({ defaultTimeoutMs: 200 });
    const started = Date.now();
    expect((await pop(broker, 'lp?wait=true')).status).toBe(204);
    expect(Date.now() - started).toBeGreaterThanOrEqual(180);
  });

  it('releases a parked pop at once when the client goes away, and marks it aborted', async () => {
    const controller = new AbortController();
    // A second parked pop shows the abort releases only its own request.
    const bystander = pop(broker, 'lp?wait=true&timeout=10000');
    const aborting = call(broker, 'GET', '/api/v1/pop/queue/lp2?wait=true&timeout=10000', undefined, { signal: controller.signal }).catch((err: Error) => err);
    const [rec] = await broker.waitForRequests(1, (r) => r.path === '/api/v1/pop/queue/lp2');
    expect(broker.parked()).toBe(2);
    controller.abort();
    expect(await aborting).toBeInstanceOf(Error);
    await waitFor(() => broker.parked() === 1, 5000, 'the pop to park');
    expect(rec!.aborted).toBe(true);
    // A push for the aborted lane is not swallowed by the dead request.
    await push(broker, [{ queue: 'lp2', payload: 1 }]);
    expect((await pop(broker, 'lp2')).status).toBe(200);
    await push(broker, [{ queue: 'lp', payload: 2 }]);
    expect((await bystander).json.messages[0].data).toBe(2);
  });

  it('answers 200 with an empty JSON batch after the timeout in json-200 mode', async () => {
    broker.setOptions({ emptyPopMode: 'json-200' });
    const started = Date.now();
    const res = await pop(broker, 'lp?wait=true&timeout=200');
    expect(Date.now() - started).toBeGreaterThanOrEqual(180);
    expect(res.status).toBe(200);
    expect(res.text).toBe('{"messages":[],"leaseId":null,"success":true}');
  });
});

describe('leases', () => {
  it('allows one in-flight batch per (partition, group)', async () => {
    await push(broker, [
      { queue: 'l', transactionId: 'a', payload: 1 },
      { queue: 'l', transactionId: 'b', payload: 2 },
    ]);
    const first = await pop(broker, 'l?consumerGroup=g');
    expect(first.json.messages.map((m: PoppedMessage) => m.transactionId)).toEqual(['a']);
    expect((await pop(broker, 'l?consumerGroup=g')).status).toBe(204);
    expect((await pop(broker, 'l?consumerGroup=h')).json.messages[0].transactionId).toBe('a');
    await ackBatch(broker, acksFor(first.json, ['completed']), 'g');
    expect((await pop(broker, 'l?consumerGroup=g')).json.messages[0].transactionId).toBe('b');
  });

  it('claims several partitions under one lease, capped by batch, and one extend renews them all', async () => {
    await push(broker, [
      { queue: 'm', partition: 'p1', transactionId: 'a', payload: 1 },
      { queue: 'm', partition: 'p1', transactionId: 'b', payload: 2 },
      { queue: 'm', partition: 'p2', transactionId: 'c', payload: 3 },
      { queue: 'm', partition: 'p3', transactionId: 'd', payload: 4 },
    ]);
    const res = await pop(broker, 'm?partitions=2&batch=3');
    const msgs = res.json.messages;
    expect(msgs.map((m: PoppedMessage) => [m.partition, m.transactionId])).toEqual([
      ['p1', 'a'],
      ['p1', 'b'],
      ['p2', 'c'],
    ]);
    expect(new Set(msgs.map((m: PoppedMessage) => m.leaseId))).toEqual(new Set([res.json.leaseId]));
    expect(res.json.partition).toBe('p1');
    expect(msgs[2].partitionId).not.toBe(res.json.partitionId);
    const before = Date.now();
    const extended = await call(broker, 'POST', `/api/v1/lease/${res.json.leaseId}/extend`, { seconds: 120 });
    expect(extended.status).toBe(200);
    expect(extended.json.renewed).toBe(2);
    expect(Date.parse(extended.json.expiresAt)).toBeGreaterThanOrEqual(before + 119_000);
    expect(Date.parse(extended.json.expiresAt)).toBeLessThanOrEqual(Date.now() + 120_000);
  });

  it('extends for 60 s on an empty body and reports an unknown lease as renewed 0', async () => {
    await push(broker, [{ queue: 'e', payload: 1 }]);
    const { json } = await pop(broker, 'e?leaseSeconds=5');
    const before = Date.now();
    const res = await call(broker, 'POST', `/api/v1/lease/${json.leaseId}/extend`);
    expect(res.json.renewed).toBe(1);
    expect(Date.parse(res.json.expiresAt)).toBeGreaterThanOrEqual(before + 59_000);
    expect((await call(broker, 'POST', '/api/v1/lease/nope/extend', { seconds: 10 })).json).toEqual({ renewed: 0, expiresAt: null });
  });

  it('redelivers after a lease expires and refuses acks on the stale lease', async () => {
    await push(broker, [{ queue: 'x', transactionId: 'a', payload: 1 }]);
    const first = await pop(broker, 'x?leaseSeconds=0.2');
    expect((await pop(broker, 'x')).status).toBe(204);
    // The message comes back once its 0.2 s lease has run out.
    const second = await waitForValue(
      async () => {
        const r = await pop(broker, 'x');
        return r.status === 200 ? r : undefined;
      },
      5000,
      'the message of the expired lease redelivered',
    );
    expect(second.json.messages[0].transactionId).toBe('a');
    expect(second.json.leaseId).not.toBe(first.json.leaseId);
    const stale = await ackBatch(broker, acksFor(first.json, ['completed']));
    expect(stale.json[0]).toMatchObject({ success: false, error: 'invalid or expired lease' });
    expect((await call(broker, 'POST', `/api/v1/lease/${first.json.leaseId}/extend`)).json.renewed).toBe(0);
  });

  it('commits the cursor inside an autoAck pop and holds no lease', async () => {
    await push(broker, [
      { queue: 'aa', payload: 1 },
      { queue: 'aa', payload: 2 },
    ]);
    const res = await pop(broker, 'aa?autoAck=true');
    expect(res.json.leaseId).toBeNull();
    expect((await pop(broker, 'aa')).json.messages[0].data).toBe(2);
  });
});

describe('ack as an offset commit', () => {
  async function popThree(group = 'g'): Promise<PopAnswer> {
    await push(
      broker,
      [1, 2, 3].map((n) => ({ queue: 'k', transactionId: `m${n}`, payload: n })),
    );
    return (await pop(broker, `k?consumerGroup=${group}&batch=10`)).json;
  }

  it('completes the gap when acking out of order', async () => {
    const popped = await popThree();
    const res = await ackBatch(broker, [acksFor(popped, [])[2]], 'g');
    expect(res.json).toEqual([{ index: 0, transactionId: 'm3', success: true, error: null, leaseReleased: true, dlq: false, noop: false }]);
    expect((await pop(broker, 'k?consumerGroup=g')).status).toBe(204);
  });

  it('reports a below-cursor ack as noop and keeps the lease until the batch end', async () => {
    const popped = await popThree();
    const acks = acksFor(popped, []);
    const single = await call(broker, 'POST', '/api/v1/ack', { ...(acks[1] as object), consumerGroup: 'g' });
    expect(single.json).toEqual([{ index: 0, transactionId: 'm2', success: true, error: null, leaseReleased: false, dlq: false, noop: false }]);
    const below = await ackBatch(broker, [acks[0]], 'g');
    expect(below.json[0]).toMatchObject({ success: true, noop: true, leaseReleased: false });
    const last = await ackBatch(broker, [acks[2]], 'g');
    expect(last.json[0]).toMatchObject({ success: true, noop: false, leaseReleased: true });
  });

  it('refuses invalid leases and unknown consumers per item with HTTP 200', async () => {
    const popped = await popThree();
    const [a] = acksFor(popped, []);
    const res = await ackBatch(broker, [{ ...a, leaseId: 'not-a-lease' }, { ...a, consumerGroup: 'never-popped' }, { transactionId: 'm1' }], 'g');
    expect(res.status).toBe(200);
    expect(res.json.map((e: ItemResult) => [e.success, e.error])).toEqual([
      [false, 'invalid or expired lease'],
      [false, 'consumer not found'],
      [false, 'transactionId and partitionId are required'],
    ]);
    expect((await pop(broker, 'k?consumerGroup=g')).status).toBe(204);
  });

  it('clamps the cursor at the lowest negative ack and redelivers from there', async () => {
    const popped = await popThree();
    const res = await ackBatch(broker, acksFor(popped, ['completed', 'retry', 'ok']), 'g');
    expect(res.json.map((e: ItemResult) => [e.success, e.noop, e.leaseReleased])).toEqual([
      [true, false, true],
      [true, false, true],
      [true, true, true],
    ]);
    const again = await pop(broker, 'k?consumerGroup=g&batch=10');
    expect(again.json.messages.map((m: PoppedMessage) => m.transactionId)).toEqual(['m2', 'm3']);
  });

  it('treats an unknown status as failed, and lets dlq beat failed at the same offset', async () => {
    const popped = await popThree();
    const acks = acksFor(popped, []);
    const res = await ackBatch(
      broker,
      [
        { ...acks[0], status: 'complete-typo' },
        { ...acks[0], status: 'dlq', error: 'unparseable payload' },
      ],
      'g',
    );
    expect(res.json.map((e: ItemResult) => [e.success, e.dlq, e.noop])).toEqual([
      [true, false, true],
      [true, true, false],
    ]);
    expect(broker.deadLetters).toEqual([
      { queue: 'k', partition: 'Default', partitionId: popped.partitionId, transactionId: 'm1', consumerGroup: 'g', data: 1, error: 'unparseable payload' },
    ]);
    const again = await pop(broker, 'k?consumerGroup=g&batch=10');
    expect(again.json.messages.map((m: PoppedMessage) => m.transactionId)).toEqual(['m2', 'm3']);
    const typo = await ackBatch(broker, [{ ...(acksFor(again.json, [])[0] as object), status: 'complet' }], 'g');
    expect(typo.json[0]).toMatchObject({ success: true, dlq: false, leaseReleased: true });
    expect((await pop(broker, 'k?consumerGroup=g')).json.messages[0].transactionId).toBe('m2');
  });
});

describe('transactions', () => {
  async function leased(): Promise<PopAnswer> {
    await push(broker, [{ queue: 's1', partition: 'acct-42', transactionId: 'order-1', payload: 1 }]);
    return (await pop(broker, 's1?consumerGroup=billing')).json;
  }

  it('applies pushes and acks together', async () => {
    const popped = await leased();
    const res = await call(broker, 'POST', '/api/v1/transaction', {
      operations: [
        { type: 'push', items: [{ queue: 's2', partition: 'acct-42', payload: { value: 2 } }] },
        { type: 'ack', transactionId: 'order-1', partitionId: popped.partitionId, status: 'completed', consumerGroup: 'billing' },
      ],
      requiredLeases: [popped.leaseId],
    });
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
    expect(res.json.results[0][0]).toMatchObject({ queueName: 's2', status: 'queued' });
    expect(res.json.results[1]).toMatchObject({ success: true, leaseReleased: true });
    expect((await pop(broker, 's1?consumerGroup=billing')).status).toBe(204);
    expect((await pop(broker, 's2')).json.messages[0].data).toEqual({ value: 2 });
  });

  it('applies nothing when a required lease is unknown or expired', async () => {
    const popped = await leased();
    const res = await call(broker, 'POST', '/api/v1/transaction', {
      operations: [
        { type: 'push', items: [{ queue: 's2', payload: 1 }] },
        { type: 'ack', transactionId: 'order-1', partitionId: popped.partitionId, consumerGroup: 'billing' },
      ],
      requiredLeases: [popped.leaseId, 'gone'],
    });
    expect(res.status).toBe(409);
    expect(res.json.error).toMatch(/gone/);
    expect((await pop(broker, 's2')).status).toBe(204);
    await ackBatch(broker, acksFor(popped, ['completed']), 'billing').then((r) => expect(r.json[0].success).toBe(true));
  });

  it('rolls the pushes back when an ack in it fails', async () => {
    const popped = await leased();
    const res = await call(broker, 'POST', '/api/v1/transaction', {
      operations: [
        { type: 'push', items: [{ queue: 's2', payload: 1 }] },
        { type: 'ack', transactionId: 'order-1', partitionId: popped.partitionId, consumerGroup: 'billing' },
        { type: 'ack', transactionId: 'order-1', partitionId: popped.partitionId, leaseId: 'other', consumerGroup: 'billing' },
      ],
    });
    expect(res.status).toBe(409);
    expect(res.json.error).toMatch(/operations\[2\]/);
    expect((await pop(broker, 's2')).status).toBe(204);
    expect((await call(broker, 'POST', `/api/v1/lease/${popped.leaseId}/extend`)).json.renewed).toBe(1);
  });

  it('refuses a malformed transaction with 400', async () => {
    const res = await call(broker, 'POST', '/api/v1/transaction', { operations: [{ type: 'delete' }] });
    expect(res.status).toBe(400);
    expect(res.json.error).toMatch(/type/);
  });
});

describe('namespace and task pops', () => {
  it('leases across queues matching a configured namespace or task, and needs one of them', async () => {
    await call(broker, 'POST', '/api/v1/configure', { queue: 'ns-a', namespace: 'shop', task: 'bill' });
    await call(broker, 'POST', '/api/v1/configure', { queue: 'ns-b', namespace: 'shop', task: 'ship' });
    await push(broker, [
      { queue: 'ns-b', payload: 'b' },
      { queue: 'other', payload: 'o' },
    ]);
    const byNamespace = await call(broker, 'GET', '/api/v1/pop?namespace=shop&batch=10');
    expect(byNamespace.json.queue).toBe('ns-b');
    expect(byNamespace.json.messages.map((m: PoppedMessage) => m.data)).toEqual(['b']);
    expect((await call(broker, 'GET', '/api/v1/pop?task=bill')).status).toBe(204);
    const missing = await call(broker, 'GET', '/api/v1/pop');
    expect(missing.status).toBe(400);
    expect(missing.json.error).toEqual(expect.any(String));
  });
});

describe('faults', () => {
  it('hang: accepts and never answers; the client giving up is recorded as aborted', async () => {
    broker.fault('hang', 1);
    const err = await call(broker, 'GET', '/health', undefined, { signal: AbortSignal.timeout(200) }).catch((e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    await waitFor(() => broker.requests[0]?.aborted === true, 5000, 'the double to see the abort');
    expect((await call(broker, 'GET', '/health')).status).toBe(200);
  });

  it('reset, garbage and truncate break the exchange in their own ways', async () => {
    broker.fault('reset', 1);
    await expect(call(broker, 'GET', '/health')).rejects.toThrow();
    broker.fault('garbage', 1);
    await expect(call(broker, 'GET', '/health')).rejects.toThrow();
    broker.fault('truncate', 1);
    const res = await request(`${broker.url}/health`, { dispatcher: agent });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-length']).toBe('100');
    await expect(res.body.text()).rejects.toThrow();
    expect((await call(broker, 'GET', '/health')).status).toBe(200);
    expect(broker.requests.map((r) => r.aborted)).toEqual([false, false, false, false]);
  });

  it('status: answers the given code for count requests, then behaves', async () => {
    broker.fault({ status: 503 }, 2);
    const first = await call(broker, 'GET', '/health');
    expect(first.status).toBe(503);
    expect(first.json.error).toEqual(expect.any(String));
    expect((await call(broker, 'GET', '/health')).status).toBe(503);
    expect((await call(broker, 'GET', '/health')).status).toBe(200);
  });

  it('lasts until cleared when no count is given', async () => {
    broker.fault({ status: 500 });
    for (let i = 0; i < 3; i++) expect((await call(broker, 'GET', '/health')).status).toBe(500);
    broker.clearFaults();
    expect((await call(broker, 'GET', '/health')).status).toBe(200);
  });
});

describe('field quirks and conveniences', () => {
  it('no-content-with-body: a 204 head followed by 29 stray bytes on the socket', async () => {
    broker.setOptions({ emptyPopMode: 'no-content-with-body' });
    const raw = await RawConnection.open(broker.port);
    const bytes = await raw.exchange('GET /api/v1/pop/queue/none HTTP/1.1\r\nHost: b\r\n\r\n', (s) => s.includes('\r\n\r\n'));
    // The next answer on the connection marks where the stray bytes end.
    const after = bytes + (await raw.exchange('GET /health HTTP/1.1\r\nHost: b\r\n\r\n', (s) => s.includes('connected"}')));
    const headEnd = after.indexOf('\r\n\r\n');
    const head = after.slice(0, headEnd);
    const stray = after.slice(headEnd + 4, after.indexOf('HTTP/1.1 200 OK'));
    expect(head.startsWith('HTTP/1.1 204 No Content')).toBe(true);
    expect(head.toLowerCase()).not.toContain('content-length');
    expect(Buffer.byteLength(stray, 'latin1')).toBe(29);
    raw.socket.destroy();
  });

  it('json-200 answers an empty non-waiting pop at once', async () => {
    broker.setOptions({ emptyPopMode: 'json-200' });
    const res = await pop(broker, 'none');
    expect(res.status).toBe(200);
    expect(res.json).toEqual({ messages: [], leaseId: null, success: true });
  });

  it('stamps x-broker and the broker CORS header on every response, faults included', async () => {
    broker.setOptions({ name: 'b1', cors: true });
    broker.fault({ status: 502 }, 1);
    for (const res of [await call(broker, 'GET', '/health'), await pop(broker, 'none'), await call(broker, 'GET', '/nope')]) {
      expect(res.headers['x-broker']).toBe('b1');
      expect(res.headers['access-control-allow-origin']).toBe('*');
    }
  });

  it('records unknown routes and answers 404', async () => {
    const res = await call(broker, 'GET', '/api/v1/resources/nothing-here?x=1');
    expect(res.status).toBe(404);
    expect(res.json).toEqual({ error: 'not found' });
    const [rec] = (await broker.waitForRequests(1)) as [RecordedRequest];
    expect(rec).toMatchObject({ method: 'GET', path: '/api/v1/resources/nothing-here', url: '/api/v1/resources/nothing-here?x=1', aborted: false });
    expect(rec.query.get('x')).toBe('1');
  });

  it('refuses oversized header blocks with 431', async () => {
    broker.setOptions({ headerLimitBytes: 4096 });
    expect((await call(broker, 'GET', '/health', undefined, { headers: { 'x-pad': 'a'.repeat(3000) } })).status).toBe(200);
    expect((await call(broker, 'GET', '/health', undefined, { headers: { 'x-pad': 'a'.repeat(5000) } })).status).toBe(431);
  });

  it('waitForRequests rejects when the requests do not come', async () => {
    await expect(broker.waitForRequests(1, (r) => r.method === 'POST', 50)).rejects.toThrow(/waited 50 ms/);
  });

  it('restarts on the same port with its state, after a crash that drops parked pops', async () => {
    await push(broker, [{ queue: 'r', payload: 1 }]);
    const parked = pop(broker, 'other?wait=true&timeout=10000').catch((e: Error) => e);
    await broker.waitForRequests(1, (r) => r.path.endsWith('/other'));
    const port = broker.port;
    await broker.close();
    expect(await parked).toBeInstanceOf(Error);
    expect(broker.parked()).toBe(0);
    expect(broker.requests.some((r) => r.aborted)).toBe(false);
    await expect(call(broker, 'GET', '/health')).rejects.toThrow();
    await broker.restart();
    expect(broker.port).toBe(port);
    expect((await pop(broker, 'r')).json.messages[0].data).toBe(1);
  });

  it('reset() clears queues and recorded requests', async () => {
    await push(broker, [{ queue: 'z', payload: 1 }]);
    broker.reset();
    expect(broker.requests).toHaveLength(0);
    expect((await pop(broker, 'z')).status).toBe(204);
  });
});
