/**
 * The pipeline's main behaviours over HTTP/2: the same requests as the h1 suites, sent
 * on one node:http2 session, so CORS, auth, the bodiless 204, abort on stream reset, the access log
 * and multiplexed long polls are proven for the protocol browsers use.
 */
import http2 from 'node:http2';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/observability/log.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';

const { NGHTTP2_CANCEL, NGHTTP2_FLAG_END_STREAM } = http2.constants;

interface H2Reply {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
  json: unknown;
  /** DATA chunks that carried at least one byte. */
  dataChunks: number;
  /** The response HEADERS frame ended the stream (no DATA frame followed). */
  endStreamOnHeaders: boolean;
}

interface H2Options {
  token?: string;
  body?: unknown;
  headers?: Record<string, string>;
  authority?: string;
}

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let rw: string;
const logLines: Record<string, unknown>[] = [];

function connect(url: string): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(url, { rejectUnauthorized: false });
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Opens a stream; the request is sent at once, the reply read whole. */
function open(method: string, path: string, opts: H2Options = {}): { stream: http2.ClientHttp2Stream; reply: Promise<H2Reply> } {
  const headers: http2.OutgoingHttpHeaders = { ':method': method, ':path': path, ':authority': opts.authority ?? 'acme.localhost', ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  const payload = opts.body === undefined ? undefined : JSON.stringify(opts.body);
  if (payload !== undefined) headers['content-type'] = 'application/json';
  const stream = session.request(headers, { endStream: payload === undefined });
  if (payload !== undefined) stream.end(payload);
  const reply = new Promise<H2Reply>((resolve, reject) => {
    let head: http2.IncomingHttpHeaders = {};
    let endStreamOnHeaders = false;
    const chunks: Buffer[] = [];
    stream.on('response', (h, flags) => {
      head = h;
      endStreamOnHeaders = (flags & NGHTTP2_FLAG_END_STREAM) !== 0;
    });
    stream.on('data', (c: Buffer) => {
      if (c.length > 0) chunks.push(c);
    });
    stream.on('end', () => {
      const body = Buffer.concat(chunks);
      let json: unknown;
      try {
        json = body.length === 0 ? undefined : JSON.parse(body.toString('utf8'));
      } catch {
        json = undefined;
      }
      resolve({ status: Number(head[':status']), headers: head, body, json, dataChunks: chunks.length, endStreamOnHeaders });
    });
    stream.on('error', reject);
  });
  return { stream, reply };
}

const h2call = (method: string, path: string, opts: H2Options = {}): Promise<H2Reply> => open(method, path, opts).reply;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1', cors: true });
  const sink = new PassThrough();
  let pending = '';
  sink.on('data', (c: Buffer) => {
    pending += c.toString('utf8');
    for (let nl = pending.indexOf('\n'); nl !== -1; nl = pending.indexOf('\n')) {
      logLines.push(JSON.parse(pending.slice(0, nl)) as Record<string, unknown>);
      pending = pending.slice(nl + 1);
    }
  });
  edge = await startEdge(testConfig([broker.url]), { log: createLogger('info', sink) });
  session = await connect(edge.url);
  rw = await token({ roles: ['read-write'], tenant: 'acme', sub: 'alice' });
});
afterAll(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
});

describe('the pipeline over HTTP/2', () => {
  it('negotiates h2 on the HTTPS listener', () => {
    expect(session.alpnProtocol).toBe('h2');
  });

  it('push, long-poll pop and ack round trip', async () => {
    const push = await h2call('POST', '/api/v1/push', {
      token: rw,
      body: { items: [{ queue: 'h2-demo', partition: 'p1', transactionId: 'h2-evt-1', payload: { n: 1 } }] },
    });
    expect(push.status).toBe(201);
    expect(push.json).toEqual([expect.objectContaining({ index: 0, transaction_id: 'h2-evt-1', status: 'queued' })]);

    const pop = await h2call('GET', '/api/v1/pop/queue/h2-demo?consumerGroup=g&batch=10&wait=true&timeout=5000', { token: rw });
    expect(pop.status).toBe(200);
    const body = pop.json as { leaseId: string; partitionId: string; messages: { transactionId: string; producerSub: string | null }[] };
    expect(body.messages.map((m) => m.transactionId)).toEqual(['h2-evt-1']);
    expect(body.messages[0]!.producerSub).toBe('alice');

    const ack = await h2call('POST', '/api/v1/ack', {
      token: rw,
      body: { transactionId: 'h2-evt-1', partitionId: body.partitionId, leaseId: body.leaseId, status: 'completed', consumerGroup: 'g' },
    });
    expect(ack.status).toBe(200);
    expect(ack.json).toEqual([expect.objectContaining({ success: true })]);
    // Upstream stays HTTP/1.1 through undici, with the h2 :authority as the forwarded host.
    const seen = forwarded(broker).find((r) => r.path === '/api/v1/ack')!;
    expect(seen.headers['x-forwarded-host']).toBe('acme.localhost');
    expect(seen.headers['x-forwarded-proto']).toBe('https');
  });

  it('answers an allowed CORS preflight at the edge and decorates actual requests', async () => {
    const before = forwarded(broker).length;
    const pre = await h2call('OPTIONS', '/api/v1/push', {
      headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    expect(pre.status).toBe(204);
    expect(pre.headers['access-control-allow-origin']).toBe('https://app.example.com');
    expect(pre.headers['access-control-allow-headers']).toBe('authorization, content-type');
    expect(pre.headers['access-control-max-age']).toBe('600');
    expect(pre.endStreamOnHeaders).toBe(true);
    expect(forwarded(broker).length).toBe(before);

    const actual = await h2call('POST', '/api/v1/push', {
      token: rw,
      headers: { origin: 'https://eu.acme.dev' },
      body: { items: [{ queue: 'h2-cors', payload: 1 }] },
    });
    expect(actual.status).toBe(201);
    // The broker's `*` is replaced by the echoed origin.
    expect(actual.headers['access-control-allow-origin']).toBe('https://eu.acme.dev');
    expect(actual.headers['access-control-expose-headers']).toBe('Retry-After, RateLimit, RateLimit-Policy, X-Request-Id');
    expect(actual.headers.vary).toBe('Origin');
    // Without it a browser blanks Resource Timing details (nextHopProtocol) for the page.
    expect(actual.headers['timing-allow-origin']).toBe('https://eu.acme.dev');
  });

  it('refuses a preflight and an actual request from an origin not listed, forwarding nothing', async () => {
    const before = forwarded(broker).length;
    const pre = await h2call('OPTIONS', '/api/v1/push', { headers: { origin: 'https://evil.example', 'access-control-request-method': 'POST' } });
    expect(pre.status).toBe(403);
    expect(pre.json).toMatchObject({ code: 'forbidden' });
    const actual = await h2call('POST', '/api/v1/push', {
      token: rw,
      headers: { origin: 'https://evil.example' },
      body: { items: [{ queue: 'x', payload: 1 }] },
    });
    expect(actual.status).toBe(403);
    expect(forwarded(broker).length).toBe(before);
  });

  it('401, 403 and 404 with their codes', async () => {
    const noToken = await h2call('GET', '/api/v1/pop/queue/q');
    expect(noToken.status).toBe(401);
    expect(noToken.headers['www-authenticate']).toMatch(/^Bearer/);
    expect(noToken.json).toMatchObject({ code: 'unauthorized' });
    const writer = await token({ roles: ['write-only'], tenant: 'acme' });
    const wrongRole = await h2call('GET', '/api/v1/pop/queue/q', { token: writer });
    expect(wrongRole.status).toBe(403);
    expect(wrongRole.json).toMatchObject({ code: 'forbidden' });
    const unknown = await h2call('GET', '/api/v1/nope', { token: rw });
    expect(unknown.status).toBe(404);
    expect(unknown.json).toMatchObject({ code: 'route_not_found' });
  });

  it('relays an empty pop as a bodiless 204: END_STREAM on HEADERS, no content-length, no DATA bytes', async () => {
    for (const mode of ['no-content', 'no-content-with-body'] as const) {
      broker.setOptions({ emptyPopMode: mode });
      const r = await h2call('GET', '/api/v1/pop/queue/h2-empty?consumerGroup=g', { token: rw });
      expect(r.status, mode).toBe(204);
      expect(r.endStreamOnHeaders, mode).toBe(true);
      expect(r.headers['content-length'], mode).toBeUndefined();
      expect(r.dataChunks, mode).toBe(0);
      expect(r.body.length, mode).toBe(0);
    }
    broker.setOptions({ emptyPopMode: 'no-content' });
    // The session survived both.
    expect((await h2call('GET', '/health')).status).toBe(200);
  });

  it('a client stream reset during a parked wait=true pop aborts the upstream request', async () => {
    const { stream, reply } = open('GET', '/api/v1/pop/queue/h2-reset?consumerGroup=g&wait=true&timeout=20000', { token: rw });
    reply.catch(() => undefined);
    await waitFor(() => broker.parked() === 1, 5000, 'the pop to park at the broker');
    const parkedReq = forwarded(broker).find((r) => r.path === '/api/v1/pop/queue/h2-reset')!;
    expect(parkedReq.aborted).toBe(false);
    stream.close(NGHTTP2_CANCEL);
    await waitFor(() => broker.parked() === 0, 5000, 'the broker to see the abort');
    expect(parkedReq.aborted).toBe(true);
    // Only that stream ended; the session goes on.
    expect((await h2call('GET', '/health')).status).toBe(200);
  });

  it('writes one access-log line per request, with proto 2.0', async () => {
    const ids = ['h2-log-health', 'h2-log-401', 'h2-log-push'];
    await h2call('GET', '/health', { headers: { 'x-request-id': ids[0]! } });
    await h2call('GET', '/api/v1/pop/queue/q', { headers: { 'x-request-id': ids[1]! } });
    await h2call('POST', '/api/v1/push', { token: rw, headers: { 'x-request-id': ids[2]! }, body: { items: [{ queue: 'h2-log', payload: 1 }] } });
    const lines = (id: string) => logLines.filter((l) => l.msg === 'request' && l.reqId === id);
    await waitFor(() => ids.every((id) => lines(id).length > 0), 5000, 'the access-log lines');
    // A late duplicate would be written when its stream closes, before a later request on the same
    // session is even read: once a sentinel's line is in, any duplicate would be too.
    await h2call('GET', '/health', { headers: { 'x-request-id': 'h2-log-sentinel' } });
    await waitFor(() => lines('h2-log-sentinel').length > 0, 5000, 'the sentinel access-log line');
    for (const [id, status] of [
      [ids[0]!, 200],
      [ids[1]!, 401],
      [ids[2]!, 201],
    ] as const) {
      expect(lines(id), id).toHaveLength(1);
      expect(lines(id)[0], id).toMatchObject({ proto: '2.0', status, tenant: status === 201 ? 'acme' : null });
    }
  });

  it('many parked polls share one session while a push and its pop still complete', async () => {
    const parkedCount = 40;
    const base = broker.parked();
    const polls = Array.from({ length: parkedCount }, (_, i) =>
      open('GET', `/api/v1/pop/queue/h2-park-${i}?consumerGroup=g&wait=true&timeout=20000`, { token: rw }),
    );
    for (const p of polls) p.reply.catch(() => undefined);
    await waitFor(() => broker.parked() === base + parkedCount, 5000, `${parkedCount} parked polls`);

    const push = await h2call('POST', '/api/v1/push', { token: rw, body: { items: [{ queue: 'h2-live', transactionId: 'live-1', payload: 'hi' }] } });
    expect(push.status).toBe(201);
    const pop = await h2call('GET', '/api/v1/pop/queue/h2-live?consumerGroup=g&wait=true&timeout=5000', { token: rw });
    expect(pop.status).toBe(200);
    expect((pop.json as { messages: { transactionId: string }[] }).messages.map((m) => m.transactionId)).toEqual(['live-1']);
    expect(broker.parked()).toBe(base + parkedCount);

    for (const p of polls) p.stream.close(NGHTTP2_CANCEL);
    await waitFor(() => broker.parked() === base, 5000, 'the parked polls to be aborted');
  });
});
