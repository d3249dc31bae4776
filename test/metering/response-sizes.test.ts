/**
 * The access log, /metrics and the tenant's usage tell what the client received at any answer
 * size: answers of about 1 KB, 20 KB, 200 KB and 2 MB, over HTTP/1.1 and h2, read by a client that
 * pauses its socket reads first (so the edge's writes hit backpressure), for push, pop, ack,
 * transaction and a plain read.
 */
import http2 from 'node:http2';
import https from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger, type LogLine } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

interface Received {
  status: number;
  bytes: number;
  json: any;
  reqId: string;
}

type Proto = 'h1' | 'h2';

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;
const captured = capturingLogger('info');

beforeAll(async () => {
  broker = await startBrokerDouble();
  const big = { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, maxPayloadBytes: 8 * 1048576 } };
  edge = await startEdge(testConfig([broker.url], { plans: { test: big }, server: { admin: { token: ADMIN_TOKEN } } }), { log: captured.log });
  session = http2.connect(edge.url, { rejectUnauthorized: false });
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
});

afterAll(async () => {
  session?.close();
  await edge?.close();
  await broker?.close();
});

/** Lets the edge's writes fill the socket before the client reads a byte. */
const PAUSE_MS = 40;

/** One request; the client does not read the answer for PAUSE_MS, then reads it whole. */
function slowCall(proto: Proto, method: 'GET' | 'POST', path: string, body?: unknown): Promise<Received> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers: Record<string, string> = { authorization: `Bearer ${rw}`, ...(payload ? { 'content-type': 'application/json' } : {}) };
  return new Promise((resolve, reject) => {
    const collect = (status: number, reqId: string, stream: NodeJS.ReadableStream & { pause(): void; resume(): void }) => {
      stream.pause();
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const buf = Buffer.concat(chunks);
        resolve({ status, bytes: buf.length, json: buf.length ? JSON.parse(buf.toString('utf8')) : undefined, reqId });
      });
      stream.on('error', reject);
      setTimeout(() => stream.resume(), PAUSE_MS);
    };
    if (proto === 'h2') {
      const stream = session.request({ ':method': method, ':path': path, ':authority': 'acme.localhost', ...headers }, { endStream: !payload });
      if (payload) stream.end(payload);
      stream.on('response', (h) => collect(Number(h[':status']), String(h['x-request-id']), stream));
      stream.on('error', reject);
      return;
    }
    const req = https.request(`${edge.url}${path}`, { method, headers: { host: 'acme.localhost', ...headers }, rejectUnauthorized: false, agent: false });
    req.on('response', (res) => collect(res.statusCode!, String(res.headers['x-request-id']), res));
    req.on('error', reject);
    req.end(payload);
  });
}

/** Items whose broker answers (push, ack, transaction, pop) grow with `txLen`. */
function items(queue: string, n: number, txLen: number, tag: string) {
  return Array.from({ length: n }, (_, i) => ({ queue, transactionId: `${tag}-${i}-`.padEnd(txLen, 'x'), payload: { i, pad: 'p'.repeat(100) } }));
}

/** [items, transactionId length] giving answers of about 1 KB, 20 KB, 200 KB and 2 MB. */
const SIZES: ReadonlyArray<readonly [string, number, number]> = [
  ['1KB', 2, 300],
  ['20KB', 20, 900],
  ['200KB', 100, 1900],
  ['2MB', 500, 4000],
];

describe('metering and logs at any response size', { timeout: 45_000 }, () => {
  it('access log, /metrics and usage equal what a slow client received, h1 and h2', async () => {
    const seen: Received[] = [];
    let pushed = 0;
    let delivered = 0;
    let acked = 0;
    const run = async (proto: Proto, method: 'GET' | 'POST', path: string, body?: unknown) => {
      const r = await slowCall(proto, method, path, body);
      seen.push(r);
      return r;
    };
    for (const proto of ['h1', 'h2'] as const) {
      for (const [label, n, txLen] of SIZES) {
        const queue = `sizes-${proto}-${label}`;
        const push = await run(proto, 'POST', '/api/v1/push', { items: items(queue, n, txLen, 'p') });
        expect(push.status).toBe(201);
        pushed += n;
        const pop = await run(proto, 'GET', `/api/v1/pop/queue/${queue}?batch=${n}`);
        expect(pop.status).toBe(200);
        expect(pop.json.messages).toHaveLength(n);
        delivered += n;
        const ack = await run(proto, 'POST', '/api/v1/ack/batch', {
          acknowledgments: pop.json.messages.map((m: any) => ({
            transactionId: m.transactionId,
            partitionId: m.partitionId,
            leaseId: m.leaseId,
            status: 'completed',
          })),
        });
        expect(ack.status).toBe(200);
        acked += n;
        const tx = await run(proto, 'POST', '/api/v1/transaction', { operations: [{ type: 'push', items: items(queue, n, txLen, 't') }] });
        expect(tx.status).toBe(200);
        pushed += n;
        const read = await run(proto, 'GET', '/api/v1/resources/queues');
        expect(read.status).toBe(200);
      }
    }
    const sizes = seen.map((r) => r.bytes);
    expect(Math.min(...sizes)).toBeLessThan(2048);
    expect(Math.max(...sizes)).toBeGreaterThan(2 * 1048576);

    // Access log: one line per request, with the status and the bytes the client got.
    const lines = new Map<string, LogLine>();
    await waitFor(
      () => {
        for (const l of captured.lines) if (l.msg === 'request') lines.set(String(l.reqId), l);
        return seen.every((r) => lines.has(r.reqId));
      },
      5000,
      'an access-log line for every request',
    );
    for (const r of seen)
      expect({ status: lines.get(r.reqId)!.status, bytesOut: lines.get(r.reqId)!.bytesOut }).toEqual({ status: r.status, bytesOut: r.bytes });

    // Usage (the admin read flushes this instance first).
    const egress = sizes.reduce((a, b) => a + b, 0);
    const usage = (await admin(edge, 'GET', '/admin/v1/tenants/acme/usage?granularity=hour')).json.total;
    expect(usage).toMatchObject({ requests: seen.length, messagesPushed: pushed, messagesDelivered: delivered, acks: acked, egressBytes: egress });

    // /metrics: every request 2xx (none under "none"), an upstream time for each, the same bytes.
    const text = (await admin(edge, 'GET', '/metrics', { token: null })).text;
    const sample = (re: RegExp) => [...text.matchAll(re)].reduce((a, m) => a + Number(m[1]), 0);
    expect(sample(/^queen_edge_requests_total\{[^}]*tenant="acme"[^}]*status="2xx"[^}]*\} (\S+)$/gm)).toBe(seen.length);
    expect(sample(/^queen_edge_requests_total\{[^}]*status="none"[^}]*\} (\S+)$/gm)).toBe(0);
    expect(sample(/^queen_edge_upstream_duration_seconds_count\{[^}]*\} (\S+)$/gm)).toBe(seen.length);
    expect(sample(/^queen_edge_bytes_total\{tenant="acme",direction="egress"\} (\S+)$/gm)).toBe(egress);
    expect(sample(/^queen_edge_messages_pushed_total\{tenant="acme"\} (\S+)$/gm)).toBe(pushed);
  });
});
