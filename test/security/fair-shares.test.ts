/**
 * Fair shares (docs/limits.md, "Fair shares"): no handful of tenants takes what every tenant
 * needs. Every tenant here is tenancy-aware on one broker double, so they share its connection
 * pool as well as the process's body budget:
 *
 * - heads that announce a 1 MiB body and send nothing hold no memory, and only for the grace;
 * - trickled streamed uploads keep the body pace or are cut, and tenants holding many requests
 *   leave the pool's reserved places to the others;
 * - eight tenants at their worst at once leave an ordinary tenant's pushes their success and
 *   close to their latency alone.
 */
import http2 from 'node:http2';
import tls from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { h2Session, readReply, startEdge, testConfig, TEST_PLAN, token, type EdgeHarness } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';

const KiB = 1024;
const MiB = 1024 * KiB;

interface Harness {
  broker: BrokerDouble;
  edge: EdgeHarness;
  tokens: Record<string, string>;
  sessions: http2.ClientHttp2Session[];
  sockets: tls.TLSSocket[];
  timers: NodeJS.Timeout[];
}

let h: Harness | undefined;

afterEach(async () => {
  if (h === undefined) return;
  for (const t of h.timers) clearInterval(t);
  for (const s of h.sessions) s.destroy();
  for (const s of h.sockets) s.destroy();
  await h.edge.close();
  await h.broker.close();
  h = undefined;
});

/** An edge with acme (the ordinary tenant) and `attackers` on one shared broker double; every token verified once. */
async function start(attackers: string[], server: Record<string, unknown> = {}, plan: Record<string, unknown> = {}): Promise<Harness> {
  const broker = await startBrokerDouble();
  // Reads of the slow readers' tenant are answered only after the upstream timeout: each holds its connection.
  broker.faultWhen((r) => (r.path === '/api/v1/status/queues' ? 'hang' : null));
  const tenant = (id: string) => ({ plan: 'attacker', hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true });
  const edge = await startEdge(
    testConfig([broker.url], {
      server,
      plans: { test: TEST_PLAN, attacker: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, ...plan } } },
      tenants: { acme: { tenancyAwareBrokers: true }, ...Object.fromEntries(attackers.map((id) => [id, tenant(id)])) },
    }),
  );
  const tokens: Record<string, string> = {};
  for (const id of ['acme', ...attackers]) {
    tokens[id] = await token({ roles: ['read-write'], tenant: id });
    // Verified once: every later head is decided synchronously.
    const r = await request(`${edge.url}/api/v1/resources/queues`, {
      headers: { host: `${id}.localhost`, authorization: `Bearer ${tokens[id]}` },
      dispatcher: edge.dispatcher,
    }).then(readReply);
    expect(r.status).toBe(200);
  }
  h = { broker, edge, tokens, sessions: [], sockets: [], timers: [] };
  return h;
}

async function session(x: Harness): Promise<http2.ClientHttp2Session> {
  const s = await h2Session(x.edge.url);
  x.sessions.push(s);
  return s;
}

/** What a request an attacker holds open ended with: its status (0: none) once closed. */
interface Held {
  /** The edge read the head and invited the body (100 Continue): it passed every check before the body. */
  readonly continued: Promise<void>;
  readonly closed: Promise<number>;
  /** The stream, for trickling. */
  readonly stream: http2.ClientHttp2Stream;
}

/** An h2 request of `length` announced bytes of which `send` are sent at once; the rest is the caller's to trickle or hold. */
function h2Held(s: http2.ClientHttp2Session, x: Harness, tenant: string, path: string, length: number, send = 0): Held {
  const stream = s.request(
    {
      ':method': 'POST',
      ':path': path,
      ':authority': `${tenant}.localhost`,
      authorization: `Bearer ${x.tokens[tenant]}`,
      'content-type': 'application/json',
      'content-length': String(length),
      expect: '100-continue',
    },
    { endStream: false },
  );
  stream.on('error', () => {});
  let status = 0;
  stream.once('response', (headers) => {
    status = Number(headers[':status']);
  });
  stream.resume();
  const continued = new Promise<void>((resolve) => stream.once('continue', () => resolve()));
  if (send > 0) void continued.then(() => stream.write(Buffer.alloc(send, 0x20)));
  return { continued, closed: new Promise((resolve) => stream.once('close', () => resolve(status))), stream };
}

/** The same over HTTP/1.1, on a TLS connection of its own. */
function h1Held(x: Harness, tenant: string, length: number): { continued: Promise<void>; closed: Promise<number> } {
  const port = Number(new URL(x.edge.url).port);
  const socket = tls.connect({ host: '127.0.0.1', port, servername: `${tenant}.localhost`, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
  x.sockets.push(socket);
  socket.on('error', () => {});
  socket.write(
    `POST /api/v1/push HTTP/1.1\r\nhost: ${tenant}.localhost\r\nauthorization: Bearer ${x.tokens[tenant]}\r\n` +
      `content-type: application/json\r\ncontent-length: ${length}\r\nexpect: 100-continue\r\n\r\n`,
  );
  let text = '';
  socket.on('data', (d: Buffer) => {
    text += d.toString('latin1');
  });
  const continued = waitFor(() => text.startsWith('HTTP/1.1 100'), 10_000, 'a 100 Continue');
  const closed = new Promise<number>((resolve) =>
    socket.once('close', () => resolve(Number(/HTTP\/1\.1 ([2-5]\d\d)/.exec(text.replace(/^HTTP\/1\.1 100[^\r]*\r\n\r\n/, ''))?.[1] ?? 0))),
  );
  return { continued, closed };
}

interface Push {
  status: number;
  ms: number;
}

/** acme pushes one small message, over HTTP/1.1 (undici) or on an h2 session; a push not answered within `boundMs` counts as status 0. */
async function push(x: Harness, s: http2.ClientHttp2Session | null, boundMs: number): Promise<Push> {
  const started = performance.now();
  const body = JSON.stringify({ items: [{ queue: 'victim', payload: { n: started } }] });
  let status = 0;
  if (s === null) {
    status = await request(`${x.edge.url}/api/v1/push`, {
      method: 'POST',
      headers: { host: 'acme.localhost', authorization: `Bearer ${x.tokens.acme}`, 'content-type': 'application/json' },
      body,
      dispatcher: x.edge.dispatcher,
      signal: AbortSignal.timeout(boundMs),
    }).then(
      (r) => readReply(r).then((reply) => reply.status),
      () => 0,
    );
  } else {
    const stream = s.request({
      ':method': 'POST',
      ':path': '/api/v1/push',
      ':authority': 'acme.localhost',
      authorization: `Bearer ${x.tokens.acme}`,
      'content-type': 'application/json',
    });
    stream.on('error', () => {});
    stream.once('response', (headers) => {
      status = Number(headers[':status']);
    });
    stream.resume();
    stream.end(body);
    const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), boundMs);
    await new Promise((resolve) => stream.once('close', resolve));
    clearTimeout(timer);
    if (performance.now() - started >= boundMs) status = 0;
  }
  return { status, ms: performance.now() - started };
}

/** Requests to the broker in flight now, as the edge counts them. */
async function brokerInflight(x: Harness): Promise<number> {
  const metric = await x.edge.app.metrics.getSingleMetric('queen_edge_broker_inflight')!.get();
  return metric.values.reduce((n, v) => Math.max(n, v.value), 0);
}

describe('fair shares', () => {
  it('heads announcing 1 MiB and sending nothing, 16 per tenant from 4 tenants over HTTP/1.1 and HTTP/2, hold no memory, and only for the grace', async () => {
    const attackers = ['a1', 'a2', 'a3', 'a4'];
    const x = await start(attackers);
    const heads: { continued: Promise<void>; closed: Promise<number> }[] = [];
    for (const a of attackers) {
      const s = await session(x);
      for (let i = 0; i < 8; i++) heads.push(h2Held(s, x, a, '/api/v1/push', MiB), h1Held(x, a, MiB));
    }
    // 64 MiB announced, the whole process budget: every head passed its checks and was invited to send.
    await Promise.all(heads.map((held) => held.continued));
    const invited = performance.now();
    const s = await session(x);
    const pushes = await Promise.all(Array.from({ length: 10 }, (_, i) => push(x, i % 2 === 0 ? null : s, 5000)));
    expect(pushes.map((p) => p.status)).toEqual(Array(10).fill(201));
    // The grace (2 s) and the pace ended them, long before the 30 s body deadline.
    expect(new Set(await Promise.all(heads.map((held) => held.closed)))).toEqual(new Set([408]));
    expect(performance.now() - invited).toBeLessThan(10_000);
  });

  it('4 tenants × 32 trickled streamed uploads leave the reserved places of a shared broker pool to a co-tenant', async () => {
    const attackers = ['a1', 'a2', 'a3', 'a4'];
    const x = await start(attackers);
    const uploads: Held[] = [];
    for (const a of attackers) {
      const s = await session(x);
      for (let i = 0; i < 32; i++) uploads.push(h2Held(s, x, a, '/api/v1/configure', 1000, 1));
    }
    x.timers.push(
      setInterval(() => {
        for (const u of uploads) if (!u.stream.closed) u.stream.write(' ');
      }, 200),
    );
    // 96 of the 128 connections are the most tenants holding many may take together.
    await waitFor(async () => (await brokerInflight(x)) >= 96, 10_000, 'the uploads to hold 96 broker connections');
    // No more: the fourth tenant's uploads wait for places (before: 128 of 128 held).
    expect(await brokerInflight(x)).toBe(96);
    const s = await session(x);
    const pushes: Push[] = [];
    for (let i = 0; i < 20 && pushes.filter((p) => p.status !== 201).length < 2; i++) pushes.push(await push(x, i % 2 === 0 ? null : s, 2000));
    expect(pushes.map((p) => p.status)).toEqual(Array(20).fill(201));
    // The trickles keep no pace: each is cut (its stream reset), none answered by the broker.
    expect(new Set(await Promise.all(uploads.map((u) => u.closed)))).toEqual(new Set([0]));
  });
});
