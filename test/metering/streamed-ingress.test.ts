/**
 * Ingress bytes of streamed bodies (docs/operating.md "Usage and billing"): a body the edge streams
 * to the broker without reading it first is admitted on its declared length but metered on what
 * reached the broker. A client that declares a large body and stops part way (h1 connection closed,
 * h2 stream reset) must not be billed for bytes nobody relayed; one that sends more than it declared
 * gets no more to the broker than it declared.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect as h2connect, constants as h2, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { connect, type TLSSocket } from 'node:tls';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Exchange, UsageRecorder } from '../../src/metering/recorder.js';
import { call, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN } from '../admin/admin-call.js';

const HOST = 'acme.localhost';
/** A streamed route the broker answers at once, when the body ended. */
const ANSWERED = '/api/v1/configure';
/** A streamed route whose answer the broker holds (nothing relayed back until the test releases it). */
const HELD = '/api/v1/consumer-groups/held/subscription';
/** A streamed route whose answer the broker starts (head and part of the body) and then holds. */
const STARTED = '/api/v1/consumer-groups/started/subscription';

/** One request as the broker saw it. */
interface Upload {
  readonly path: string;
  /** The X-Request-Id the edge sent, which names its access-log line. */
  readonly reqId: string;
  /** Body bytes received so far. */
  got: number;
  /** The whole declared body arrived ('end'). */
  complete: boolean;
  /** The exchange is over at the broker (answered, or its connection cut). */
  closed: boolean;
}

/** A broker that reports every body byte as it arrives. */
class CountingBroker {
  readonly uploads: Upload[] = [];
  readonly held: ServerResponse[] = [];
  #waiters = new Set<() => void>();
  server!: Server;
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req: IncomingMessage, res: ServerResponse) => {
      if (req.url === '/health') return void res.end('{"status":"healthy"}');
      const u: Upload = { path: req.url ?? '', reqId: String(req.headers['x-request-id']), got: 0, complete: false, closed: false };
      this.uploads.push(u);
      req.on('data', (c: Buffer) => {
        u.got += c.length;
        this.#notify();
      });
      req.on('end', () => {
        u.complete = true;
        this.#notify();
        if (u.path === HELD) return void this.held.push(res);
        if (u.path === STARTED) {
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': '20' });
          res.write('{"started":');
          return void this.held.push(res);
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
      res.on('close', () => {
        u.closed = true;
        this.#notify();
      });
    });
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Resolves once `cond` holds, re-checked whenever the broker receives something. */
  until(cond: () => boolean): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (!cond()) return;
        this.#waiters.delete(check);
        resolve();
      };
      this.#waiters.add(check);
      check();
    });
  }

  /** The next upload of `path` to arrive from now on. */
  next(path: string): () => Upload | undefined {
    const from = this.uploads.length;
    return () => this.uploads.slice(from).find((u) => u.path === path);
  }

  #notify(): void {
    for (const w of [...this.#waiters]) w();
  }

  async close(): Promise<void> {
    for (const r of this.held) r.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

function rawTls(port: number): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }, () => resolve(s));
    s.once('error', reject);
  });
}

function h1Head(path: string, tok: string, length: number): string {
  return `POST ${path} HTTP/1.1\r\nhost: ${HOST}\r\nauthorization: Bearer ${tok}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
}

function h2Upload(session: ClientHttp2Session, path: string, tok: string, length: number): ClientHttp2Stream {
  const stream = session.request({
    ':method': 'POST',
    ':path': path,
    ':authority': HOST,
    authorization: `Bearer ${tok}`,
    'content-type': 'application/json',
    'content-length': String(length),
  });
  stream.on('error', () => undefined);
  return stream;
}

const broker = new CountingBroker();

beforeAll(() => broker.start());
afterAll(() => broker.close());

describe('ingress bytes of a streamed body are the bytes the broker got', () => {
  let h: EdgeHarness;
  let tok: string;
  let port: number;
  const recorded: Exchange[] = [];
  const usage: UsageRecorder = { record: (x) => void recorded.push(x) };
  const captured = capturingLogger('info');

  beforeAll(async () => {
    h = await startEdge(
      testConfig([broker.url], {
        plans: { test: TEST_PLAN, capped: { ...TEST_PLAN, quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 1000 } } },
        // acme and capped share one broker double: declared tenancy-aware, as a shared broker must be.
        tenants: {
          acme: { tenancyAwareBrokers: true },
          capped: { plan: 'capped', hosts: ['capped.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
        },
      }),
      { usage, log: captured.log },
    );
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
    port = Number(new URL(h.url).port);
  });

  afterAll(() => h?.close());

  /** The access log's bytesIn for request `reqId`, once its line is written. */
  async function loggedBytesIn(reqId: string): Promise<unknown> {
    const line = () => captured.lines.find((l) => l.msg === 'request' && l.reqId === reqId);
    await waitFor(() => line() !== undefined, 10_000, `the access-log line of ${reqId}`);
    return line()!.bytesIn;
  }

  /** The one exchange of `route` (by name) recorded from now on. */
  function nextRecord(route: string): () => Promise<Exchange> {
    const from = recorded.length;
    return async () => {
      await waitFor(() => recorded.slice(from).some((x) => x.route.name === route), 10_000, `the ${route} exchange to be metered`);
      const mine = recorded.slice(from).filter((x) => x.route.name === route);
      expect(mine).toHaveLength(1);
      return mine[0]!;
    };
  }

  it('h1: a client that declares 1,000,000 bytes, sends 1,000 and closes the connection is billed 1,000', async () => {
    const record = nextRecord('configure');
    const upload = broker.next(ANSWERED);
    const socket = await rawTls(port);
    socket.write(h1Head(ANSWERED, tok, 1_000_000));
    socket.write(Buffer.alloc(1000, 'a'));
    await broker.until(() => (upload()?.got ?? 0) === 1000);
    socket.destroy();
    await broker.until(() => upload()!.closed);
    const x = await record();
    expect(upload()!.complete).toBe(false);
    expect(x.bytesIn).toBe(1000);
    expect(x.bytesIn).toBe(upload()!.got);
    expect(await loggedBytesIn(upload()!.reqId)).toBe(1000);
  });

  it('h2: a stream that declares 1,000,000 bytes, sends 1,000 and is reset (CANCEL) is billed 1,000, and the session keeps serving', async () => {
    const record = nextRecord('configure');
    const upload = broker.next(ANSWERED);
    const session = h2connect(h.url, { rejectUnauthorized: false });
    session.on('error', () => undefined);
    try {
      const stream = h2Upload(session, ANSWERED, tok, 1_000_000);
      stream.write(Buffer.alloc(1000, 'b'));
      await broker.until(() => (upload()?.got ?? 0) === 1000);
      stream.close(h2.NGHTTP2_CANCEL);
      await broker.until(() => upload()!.closed);
      const x = await record();
      expect(upload()!.complete).toBe(false);
      expect(x.bytesIn).toBe(1000);
      expect(x.bytesIn).toBe(upload()!.got);
      expect(await loggedBytesIn(upload()!.reqId)).toBe(1000);
      // The reset cost only its stream.
      const next = nextRecord('configure');
      const after = h2Upload(session, ANSWERED, tok, 2);
      after.end('{}');
      expect(await new Promise<number>((r) => after.once('response', (hd) => r(Number(hd[':status']))))).toBe(200);
      after.resume();
      expect((await next()).bytesIn).toBe(2);
    } finally {
      session.destroy();
    }
  });

  it.each(['h1', 'h2'] as const)('%s: a whole streamed body is billed whole (300,000 bytes in pieces)', async (proto) => {
    const record = nextRecord('configure');
    const upload = broker.next(ANSWERED);
    const body = Buffer.alloc(300_000, 'c');
    if (proto === 'h1') {
      const r = await call(h, 'POST', ANSWERED, { token: tok, body: body.toString() });
      expect(r.status).toBe(200);
    } else {
      const session = h2connect(h.url, { rejectUnauthorized: false });
      try {
        const stream = h2Upload(session, ANSWERED, tok, body.length);
        for (let i = 0; i < body.length; i += 50_000) stream.write(body.subarray(i, i + 50_000));
        stream.end();
        expect(await new Promise<number>((r) => stream.once('response', (hd) => r(Number(hd[':status']))))).toBe(200);
        stream.resume();
        await new Promise<void>((r) => stream.once('close', () => r()));
      } finally {
        session.destroy();
      }
    }
    const x = await record();
    expect(upload()!.got).toBe(body.length);
    expect(x.bytesIn).toBe(body.length);
  });

  it('h1: a client that sent its whole body and leaves before the answer is billed the whole body', async () => {
    const record = nextRecord('consumer-groups.subscription');
    const upload = broker.next(HELD);
    const socket = await rawTls(port);
    socket.write(h1Head(HELD, tok, 5000));
    socket.write(Buffer.alloc(5000, 'd'));
    await broker.until(() => upload()?.complete === true);
    socket.destroy();
    await broker.until(() => upload()!.closed);
    expect((await record()).bytesIn).toBe(5000);
  });

  it('h1: a client that leaves once the broker answered (head relayed, body under way) is billed the whole body', async () => {
    const record = nextRecord('consumer-groups.subscription');
    const upload = broker.next(STARTED);
    const socket = await rawTls(port);
    let received = '';
    const head = new Promise<void>((resolve) =>
      socket.on('data', (d: Buffer) => {
        received += d.toString('latin1');
        if (received.includes('{"started":')) resolve();
      }),
    );
    socket.write(h1Head(STARTED, tok, 4000));
    socket.write(Buffer.alloc(4000, 'e'));
    await head;
    expect(received).toMatch(/^HTTP\/1\.1 200 /);
    socket.destroy();
    await broker.until(() => upload()!.closed);
    const x = await record();
    expect(upload()!.got).toBe(4000);
    expect(x.bytesIn).toBe(4000);
  });

  it('h1: bytes sent past the declared length never reach the broker as body (the parser ends the body there)', async () => {
    const record = nextRecord('consumer-groups.subscription');
    const from = broker.uploads.length;
    const upload = broker.next(HELD);
    const socket = await rawTls(port);
    socket.on('error', () => undefined);
    socket.resume();
    const closed = new Promise<void>((r) => socket.once('close', () => r()));
    socket.write(h1Head(HELD, tok, 1000));
    socket.write(Buffer.alloc(1000, 'f'));
    await broker.until(() => upload()?.complete === true);
    // 50,000 more bytes on the same connection while the exchange is in flight: not body, a bad request.
    socket.write(Buffer.alloc(50_000, 'f'));
    await closed;
    await broker.until(() => upload()!.closed);
    const x = await record();
    expect(broker.uploads.slice(from).map((u) => u.got)).toEqual([1000]);
    expect(x.bytesIn).toBe(1000);
  });

  it('h2: DATA past the declared length resets the stream (PROTOCOL_ERROR); the broker got the declared bytes and they are what is billed', async () => {
    const record = nextRecord('consumer-groups.subscription');
    const from = broker.uploads.length;
    const upload = broker.next(HELD);
    const session = h2connect(h.url, { rejectUnauthorized: false });
    session.on('error', () => undefined);
    try {
      const stream = h2Upload(session, HELD, tok, 1000);
      stream.write(Buffer.alloc(1000, 'g'));
      await broker.until(() => upload()?.complete === true);
      stream.write(Buffer.alloc(1000, 'g'));
      await new Promise<void>((r) => stream.once('close', () => r()));
      expect(stream.rstCode).toBe(h2.NGHTTP2_PROTOCOL_ERROR);
      await broker.until(() => upload()!.closed);
      const x = await record();
      expect(broker.uploads.slice(from).map((u) => u.got)).toEqual([1000]);
      expect(x.bytesIn).toBe(1000);
    } finally {
      session.destroy();
    }
  });

  it('a streamed body refused by the byte quota after the head was admitted is not relayed and not billed', async () => {
    const record = nextRecord('configure');
    const from = broker.uploads.length;
    const capped = await token({ roles: ['read-write'], tenant: 'capped' });
    const r = await call(h, 'POST', ANSWERED, { token: capped, host: 'capped.localhost', body: 'x'.repeat(5000) });
    expect(r.status).toBe(429);
    expect(r.json).toMatchObject({ code: 'quota_exceeded' });
    const x = await record();
    expect(x.code).toBe('quota_exceeded');
    expect(x.bytesIn).toBe(0);
    expect(await loggedBytesIn(String(r.headers['x-request-id']))).toBe(0);
    expect(broker.uploads.slice(from)).toEqual([]);
  });
});

describe('the billing export', () => {
  let h: EdgeHarness;
  let tok: string;

  beforeAll(async () => {
    h = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } } }));
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
  });

  afterAll(() => h?.close());

  async function exported(): Promise<{ requests: number; ingress: number }> {
    const res = await request(`${h.adminUrl}/admin/v1/usage/export?granularity=day&format=jsonl&tenant=acme`, {
      headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
    });
    expect(res.statusCode).toBe(200);
    const rows = (await res.body.text())
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as { requests: number; ingress_bytes: number });
    return rows.reduce((a, r) => ({ requests: a.requests + r.requests, ingress: a.ingress + r.ingress_bytes }), { requests: 0, ingress: 0 });
  }

  it('ingress_bytes is what the broker got: an upload cut at 2,000 of 500,000 declared bytes, then a whole one of 3,000', async () => {
    const before = broker.uploads.length;
    const upload = broker.next(ANSWERED);
    const socket = await rawTls(Number(new URL(h.url).port));
    socket.write(h1Head(ANSWERED, tok, 500_000));
    socket.write(Buffer.alloc(2000, 'h'));
    await broker.until(() => (upload()?.got ?? 0) === 2000);
    socket.destroy();
    await broker.until(() => upload()!.closed);
    expect((await call(h, 'POST', ANSWERED, { token: tok, body: 'i'.repeat(3000) })).status).toBe(200);

    let total = { requests: 0, ingress: 0 };
    await waitFor(
      async () => {
        total = await exported();
        return total.requests === 2;
      },
      10_000,
      'both requests in the export',
    );
    const brokerGot = broker.uploads.slice(before).reduce((n, u) => n + u.got, 0);
    expect(brokerGot).toBe(5000);
    expect(total.ingress).toBe(brokerGot);
  });
});
