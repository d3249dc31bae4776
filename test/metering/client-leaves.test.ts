/**
 * Metering truth (docs/operating.md "Usage and billing"): the broker acted on a request whose
 * answer the client never waited for, or took most of and dropped before the last byte, or it
 * spooled the pushes to write them later. None of these makes the messages free.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect, type TLSSocket } from 'node:tls';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UsageCounts, countExchange } from '../../src/metering/counts.js';
import type { Exchange, UsageRecorder } from '../../src/metering/recorder.js';
import { startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';

const HOST = 'acme.localhost';
const MESSAGES = 5;

/** A pop answer of MESSAGES messages, cut where the last message starts. */
function popAnswer(): { head: Buffer; tail: Buffer } {
  const payload = 'p'.repeat(2000);
  const doc = JSON.stringify({ messages: Array.from({ length: MESSAGES }, (_, i) => ({ transactionId: `m${i}`, data: payload })), leaseId: 'lease-1' });
  const cut = doc.indexOf(`"m${MESSAGES - 1}"`);
  return { head: Buffer.from(doc.slice(0, cut)), tail: Buffer.from(doc.slice(cut)) };
}

describe('a client that leaves does not make what the broker did free', () => {
  let broker: Server;
  let h: EdgeHarness;
  let tok: string;
  const recorded: Exchange[] = [];
  const usage: UsageRecorder = { record: (x) => void recorded.push(x) };
  let pushArrived: (() => void) | null = null;
  let releasePop: (() => void) | null = null;
  const held: ServerResponse[] = [];

  beforeAll(async () => {
    broker = createServer((req: IncomingMessage, res: ServerResponse) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (req.url === '/health') return void res.end('{"status":"healthy"}');
        if (req.url === '/api/v1/push' && (JSON.parse(Buffer.concat(chunks).toString()) as { items: Array<{ queue: string }> }).items[0]!.queue === 'spool') {
          // The database is down: every item goes to the broker's spool, to be written on replay.
          res.writeHead(201, { 'content-type': 'application/json' });
          return void res.end(JSON.stringify([{ status: 'buffered' }, { status: 'buffered' }]));
        }
        if (req.url === '/api/v1/push' || req.url === '/api/v1/ack/batch' || req.url === '/api/v1/transaction') {
          // The push, ack or transaction is taken (a broker would have acted on it) and its answer never comes.
          held.push(res);
          pushArrived?.();
          return;
        }
        const { head, tail } = popAnswer();
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(head.length + tail.length) });
        res.write(head);
        releasePop = () => res.end(tail);
      });
    });
    await new Promise<void>((r) => broker.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(broker.address() as AddressInfo).port}`;
    h = await startEdge(testConfig([url]), { usage });
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
  });

  afterAll(async () => {
    await h?.close();
    for (const r of held) r.destroy();
    broker?.closeAllConnections();
    await new Promise<void>((r) => broker?.close(() => r()));
  });

  function counted(route: string): UsageCounts {
    const c = new UsageCounts();
    for (const x of recorded) if (x.route.name === route) countExchange(c, x);
    return c;
  }

  /** Sends `body` to `path`, and leaves as soon as the broker has it. */
  async function sendAndLeave(path: string, body: unknown): Promise<void> {
    const arrived = new Promise<void>((r) => (pushArrived = r));
    const abort = new AbortController();
    const sent = request(`${h.url}${path}`, {
      method: 'POST',
      headers: { host: HOST, authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
      body: JSON.stringify(body),
      dispatcher: h.dispatcher,
      signal: abort.signal,
    });
    await arrived;
    abort.abort();
    await sent.catch(() => undefined);
  }

  it('a push whose client leaves once it reached the broker is counted from the request', async () => {
    await sendAndLeave('/api/v1/push', { items: [1, 2, 3].map((n) => ({ queue: 'q', payload: n })) });
    await waitFor(() => recorded.some((x) => x.route.name === 'push'), 10_000, 'the push to be metered');
    expect(counted('push').messagesPushed).toBe(3);
  });

  it('an ack batch whose client leaves once it reached the broker is counted from the request', async () => {
    const ack = (i: number) => ({ transactionId: `t${i}`, partitionId: 'p', leaseId: 'lease-1', status: 'completed' });
    await sendAndLeave('/api/v1/ack/batch', { consumerGroup: 'g', acknowledgments: [ack(1), ack(2)] });
    await waitFor(() => recorded.some((x) => x.route.name === 'ack.batch'), 10_000, 'the ack batch to be metered');
    expect(counted('ack.batch').acks).toBe(2);
  });

  it('a transaction whose client leaves once it reached the broker counts its pushes and its acks from the request', async () => {
    const ack = (i: number) => ({ type: 'ack', transactionId: `t${i}`, partitionId: 'p', leaseId: 'lease-1', status: 'completed' });
    await sendAndLeave('/api/v1/transaction', {
      operations: [
        ack(1),
        {
          type: 'push',
          items: [
            { queue: 'q', payload: 1 },
            { queue: 'q', payload: 2 },
          ],
        },
        ack(2),
        ack(3),
      ],
    });
    await waitFor(() => recorded.some((x) => x.route.name === 'transaction'), 10_000, 'the transaction to be metered');
    expect(counted('transaction')).toMatchObject({ messagesPushed: 2, acks: 3 });
  });

  it('a pop whose client takes most of the batch and leaves before the last byte is counted whole', async () => {
    const socket = await new Promise<TLSSocket>((resolve, reject) => {
      const s = connect({ host: '127.0.0.1', port: Number(new URL(h.url).port), rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }, () => resolve(s));
      s.once('error', reject);
    });
    let received = '';
    const gotMost = new Promise<void>((resolve) =>
      socket.on('data', (d: Buffer) => {
        received += d.toString('latin1');
        if (received.includes(`"m${MESSAGES - 2}"`)) resolve();
      }),
    );
    socket.write(`GET /api/v1/pop/queue/q?batch=${MESSAGES} HTTP/1.1\r\nhost: ${HOST}\r\nauthorization: Bearer ${tok}\r\n\r\n`);
    await gotMost;
    socket.destroy();
    // The edge saw the client go (its request is in /metrics) before the broker sends the rest.
    await waitFor(
      async () => {
        const text = await (await request(`${h.adminUrl}/metrics`)).body.text();
        return text.includes('route="pop.queue"');
      },
      10_000,
      'the edge to notice the client left',
    );
    releasePop!();
    await waitFor(() => recorded.some((x) => x.route.name === 'pop.queue'), 10_000, 'the pop to be metered');
    expect(counted('pop.queue').messagesDelivered).toBe(MESSAGES);
  });

  it('pushes the broker spooled (buffered, written on its replay) are counted', async () => {
    const body = JSON.stringify({
      items: [
        { queue: 'spool', payload: 1 },
        { queue: 'spool', payload: 2 },
      ],
    });
    const res = await request(`${h.url}/api/v1/push`, {
      method: 'POST',
      headers: { host: 'acme.localhost', authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
      body,
      dispatcher: h.dispatcher,
    });
    expect(res.statusCode).toBe(201);
    await res.body.dump();
    await waitFor(() => recorded.some((x) => x.route.name === 'push' && x.status === 201), 10_000, 'the spooled push to be metered');
    const c = new UsageCounts();
    for (const x of recorded) if (x.route.name === 'push' && x.status === 201) countExchange(c, x);
    expect(c.messagesPushed).toBe(2);
  });
});
