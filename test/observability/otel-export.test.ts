/**
 * OpenTelemetry traces of the edge, as a real OTLP/HTTP receiver decodes them (protobuf, with the
 * protocol's schema): the tree of spans of a push, a long poll and a refusal; sampling by parent,
 * by tenant and for refusals; what a client's trace headers may and may not decide; and a
 * collector that is down or hangs, which the request path never waits for.
 */
import type { Redis } from 'ioredis';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, h2Session, startEdge, TEST_PLAN, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SPAN_KIND, STATUS_ERROR, startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { mintKey } from '../../src/keys/format.js';
import { apiKeyKeys } from '../../src/redis/keys.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { keyPair, signWith, type TestKeyPair } from '../helpers/tokens.js';
import { waitFor, waitForValue } from '../helpers/wait.js';

const TRACE_ID = '4bf92f3577b34da6a3ce929d0e0e4736';
const CLIENT_SPAN = '00f067aa0ba902b7';

let broker: BrokerDouble;
let quietBroker: BrokerDouble;
let idpBroker: BrokerDouble;
let jwks: JwksServer;
let first: TestKeyPair;
let receiver: OtlpReceiver;
let h: EdgeHarness;
let redis: Redis;
const prefix = uniquePrefix();
const apiKey = mintKey();

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  quietBroker = await startBrokerDouble({ name: 'quiet' });
  idpBroker = await startBrokerDouble({ name: 'idp' });
  first = await keyPair('ES256');
  jwks = await startJwksServer([first.publicJwk]);
  receiver = await startOtlpReceiver();
  redis = await connectTest(SHARED_REDIS_URL);
  h = await startEdge(
    testConfig([broker.url], {
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
      // No request is sampled by the edge's ratio: acme's own ratio traces all of its requests.
      tracing: { enabled: true, endpoint: receiver.url, ratio: 0, alwaysSampleRefusals: true, exportDelayMs: 20 },
      plans: { test: TEST_PLAN, quiet: { ...TEST_PLAN, traceRatio: 0 } },
      tenants: {
        acme: { traceRatio: 1 },
        quiet: { plan: 'quiet', hosts: ['quiet.localhost'], brokers: [quietBroker.url] },
        // Refused before any broker is asked: an address nothing listens on.
        plain: { plan: 'test', hosts: ['plain.localhost'], brokers: ['http://127.0.0.1:9'] },
        idp: { plan: 'test', hosts: ['idp.localhost'], brokers: [idpBroker.url], traceRatio: 1, auth: { jwksUrl: jwks.url } },
      },
    }),
  );
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
  await quietBroker?.close();
  await idpBroker?.close();
  await jwks?.close();
  await receiver?.close();
  if (redis) {
    await flushPrefix(redis, prefix);
    redis.disconnect();
  }
});

const spansOf = (traceId: string): ReceivedSpan[] => receiver.spans.filter((s) => s.traceId === traceId);
const serverSpan = (pred: (s: ReceivedSpan) => boolean): ReceivedSpan | undefined => receiver.spans.find((s) => s.kind === SPAN_KIND.server && pred(s));
const childrenOf = (parent: ReceivedSpan): ReceivedSpan[] => receiver.spans.filter((s) => s.parentSpanId === parent.spanId && s.traceId === parent.traceId);

/** Waits for the server span of the request with id `reqId` and for its `n` children. */
async function treeOf(reqId: string, n: number): Promise<{ server: ReceivedSpan; children: ReceivedSpan[] }> {
  const server = await waitForValue(() => serverSpan((s) => s.attributes['queen.request_id'] === reqId), 5000, `the server span of ${reqId}`);
  await waitFor(() => childrenOf(server).length >= n, 5000, `${n} children of ${reqId}'s server span`);
  return { server, children: childrenOf(server) };
}

async function metric(name: string, labels = ''): Promise<number> {
  const text = await (await request(`${h.adminUrl}/metrics`)).body.text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

describe('the spans of a push', () => {
  it("are a server span under the client's, with children for the token, the admit and the broker call, whose context the broker gets", async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await call(h, 'POST', '/api/v1/push', {
      token: tok,
      body: { items: [{ queue: 'traced', payload: { secret: 'payload-marker' } }] },
      headers: { traceparent: `00-${TRACE_ID}-${CLIENT_SPAN}-01`, tracestate: 'congo=t61rcWkgMzE', baggage: 'user=alice', 'x-request-id': 'push-1' },
    });
    expect(r.status).toBe(201);

    const { server, children } = await treeOf('push-1', 3);
    expect(server.traceId).toBe(TRACE_ID);
    expect(server.parentSpanId).toBe(CLIENT_SPAN);
    expect(server.name).toBe('POST push');
    expect(server.attributes).toMatchObject({
      'http.request.method': 'POST',
      'http.route': 'push',
      'http.response.status_code': 201,
      'queen.tenant': 'acme',
      'queen.lane': 'traced:Default',
    });
    expect(server.resource['service.name']).toBe('queen-edge');
    const names = children.map((c) => c.name).sort();
    expect(names).toEqual(['POST', 'auth.jwt', 'limiter.admit']);
    const client = children.find((c) => c.kind === SPAN_KIND.client)!;
    expect(client.attributes).toMatchObject({ 'server.address': '127.0.0.1', 'http.response.status_code': 201 });
    // Each child lies within its parent.
    for (const c of children) expect(c.startNs >= server.startNs && c.endNs <= server.endNs).toBe(true);

    // The broker joins the edge's client span, not the client's own.
    const sent = forwarded(broker).find((q) => q.headers['x-request-id'] === 'push-1')!;
    expect(sent.headers.traceparent).toBe(`00-${TRACE_ID}-${client.spanId}-01`);
    expect(sent.headers.tracestate).toBe('congo=t61rcWkgMzE');
    // Baggage is not relayed unless the operator asks for it.
    expect(sent.headers.baggage).toBeUndefined();

    // The client's tracestate and baggage, its token and the payload are in no span.
    for (const s of spansOf(TRACE_ID)) {
      expect(s.traceState).toBe('');
      const values = JSON.stringify(s.attributes);
      expect(values).not.toContain(tok);
      expect(values).not.toContain('payload-marker');
      expect(values).not.toContain('alice');
    }
  });

  it("follows a client that sampled its trace out (parent-based), and the broker still gets the client's traceparent", async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const traceId = 'aaaa2f3577b34da6a3ce929d0e0e4736';
    const traceparent = `00-${traceId}-${CLIENT_SPAN}-00`;
    const r = await call(h, 'POST', '/api/v1/push', {
      token: tok,
      body: { items: [{ queue: 'q', payload: 1 }] },
      headers: { traceparent, 'x-request-id': 'unsampled-1' },
    });
    expect(r.status).toBe(201);
    // A sampled request after it: once its spans are in, the unsampled one's would be too.
    await call(h, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: 1 }] }, headers: { 'x-request-id': 'after-unsampled' } });
    await treeOf('after-unsampled', 2);
    expect(spansOf(traceId)).toEqual([]);
    expect(forwarded(broker).find((q) => q.headers['x-request-id'] === 'unsampled-1')!.headers.traceparent).toBe(traceparent);
  });
});

describe('an API key', () => {
  it('its first check (its record read from Redis) is a span of its own, and the key is in none', async () => {
    const keys = apiKeyKeys(prefix);
    const record = { id: apiKey.id, tenant: 'acme', name: 'traced', roles: ['read-write'], createdAt: Date.now(), expiresAt: null, hash: apiKey.hash };
    await redis.set(keys.key(apiKey.id), JSON.stringify(record));
    await redis.sadd(keys.tenant('acme'), apiKey.id);
    const r = await call(h, 'POST', '/api/v1/push', { token: apiKey.key, body: { items: [{ queue: 'q', payload: 1 }] }, headers: { 'x-request-id': 'key-1' } });
    expect(r.status).toBe(201);
    const { server, children } = await treeOf('key-1', 3);
    expect(children.find((c) => c.name === 'auth.api_key')?.attributes['queen.auth.ok']).toBe(true);
    for (const s of [server, ...children]) expect(JSON.stringify(s.attributes)).not.toContain(apiKey.key);
  });
});

describe('over HTTP/2', () => {
  it('a push on an h2 stream has the same tree, its protocol version 2.0', async () => {
    const session = await h2Session(h.url);
    try {
      const tok = await token({ roles: ['read-write'], tenant: 'acme' });
      const stream = session.request({
        ':method': 'POST',
        ':path': '/api/v1/push',
        ':authority': 'acme.localhost',
        authorization: `Bearer ${tok}`,
        'content-type': 'application/json',
        'x-request-id': 'h2-1',
      });
      stream.end(JSON.stringify({ items: [{ queue: 'h2q', payload: 1 }] }));
      const status = await new Promise<number>((resolve, reject) => {
        stream.on('response', (head) => resolve(Number(head[':status'])));
        stream.on('error', reject);
      });
      stream.resume();
      expect(status).toBe(201);
      const { server, children } = await treeOf('h2-1', 2);
      expect(server.attributes).toMatchObject({ 'network.protocol.version': '2.0', 'http.route': 'push', 'http.response.status_code': 201 });
      // The token may have been verified before (same claims, same second): auth.jwt is not asked for.
      expect(children.map((c) => c.name)).toEqual(expect.arrayContaining(['POST', 'limiter.admit']));
    } finally {
      session.close();
    }
  });
});

describe("a tenant's identity provider", () => {
  it('a JWKS fetch the token waited for (a rotated key) is a span of its request', async () => {
    const claims = { sub: 'u1', roles: ['read-write'], exp: Math.floor(Date.now() / 1000) + 600 };
    const push = (tok: string, id: string) =>
      call(h, 'POST', '/api/v1/push', { token: tok, host: 'idp.localhost', body: { items: [{ queue: 'q', payload: 1 }] }, headers: { 'x-request-id': id } });
    expect((await push(await signWith(first, claims), 'idp-before')).status).toBe(201);
    const fetches = jwks.requests;
    const rotated = await keyPair('ES256');
    jwks.setKeys([first.publicJwk, rotated.publicJwk]);
    expect((await push(await signWith(rotated, claims), 'idp-rotated')).status).toBe(201);
    expect(jwks.requests).toBe(fetches + 1);
    const { children } = await treeOf('idp-rotated', 3);
    const fetch = await waitForValue(() => children.find((c) => c.name === 'auth.jwks_fetch'), 5000, 'the JWKS fetch span');
    expect(fetch.attributes['queen.jwks.loaded']).toBe(true);
    const auth = children.find((c) => c.name === 'auth.jwt')!;
    expect(fetch.startNs >= auth.startNs && fetch.endNs <= auth.endNs).toBe(true);
  });
});

describe('a long poll', () => {
  it('shows its time parked at the broker as a span under the broker call', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await call(h, 'GET', '/api/v1/pop/queue/empty-q?wait=true&timeout=300', { token: tok, headers: { 'x-request-id': 'poll-1' } });
    expect(r.status).toBe(204);
    const { server, children } = await treeOf('poll-1', 2);
    expect(server.attributes['http.route']).toBe('pop.queue');
    const client = children.find((c) => c.kind === SPAN_KIND.client)!;
    expect(client.attributes['queen.long_poll']).toBe(true);
    const parked = await waitForValue(() => childrenOf(client).find((c) => c.name === 'long_poll.parked'), 5000, 'the parked span');
    // The broker double parks for the poll's timeout before its empty answer.
    expect(Number(parked.endNs - parked.startNs) / 1e6).toBeGreaterThanOrEqual(250);
  });
});

describe('refusals and tenants', () => {
  it('a refusal is traced though the edge samples nothing, with its code', async () => {
    const r = await call(h, 'POST', '/api/v1/push', { host: 'plain.localhost', body: { items: [] }, headers: { 'x-request-id': 'refused-1' } });
    expect(r.status).toBe(401);
    const server = await waitForValue(() => serverSpan((s) => s.attributes['queen.request_id'] === 'refused-1'), 5000, 'the refusal span');
    expect(server.attributes).toMatchObject({ 'http.response.status_code': 401, 'queen.code': 'unauthorized', 'error.type': 'unauthorized' });
    // A 4xx is the client's error, not the server's (HTTP semantic conventions).
    expect(server.statusCode).not.toBe(STATUS_ERROR);
  });

  it('a refusal of a tenant whose plan samples nothing is not traced: its clients cannot fill the shared queue', async () => {
    expect((await call(h, 'POST', '/api/v1/push', { host: 'quiet.localhost', body: { items: [] }, headers: { 'x-request-id': 'quiet-refused' } })).status).toBe(
      401,
    );
    await call(h, 'POST', '/api/v1/push', { host: 'plain.localhost', body: { items: [] }, headers: { 'x-request-id': 'after-quiet-refused' } });
    await waitForValue(() => serverSpan((s) => s.attributes['queen.request_id'] === 'after-quiet-refused'), 5000, 'the later refusal span');
    expect(receiver.spans.filter((s) => s.attributes['queen.request_id'] === 'quiet-refused')).toEqual([]);
  });

  it('a tenant whose plan samples nothing has no spans, even when its client sends a sampled parent', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'quiet' });
    const r = await call(h, 'POST', '/api/v1/push', {
      token: tok,
      host: 'quiet.localhost',
      body: { items: [{ queue: 'q', payload: 1 }] },
      headers: { 'x-request-id': 'quiet-1', traceparent: `00-bbbb2f3577b34da6a3ce929d0e0e4736-${CLIENT_SPAN}-01` },
    });
    expect(r.status).toBe(201);
    await call(h, 'POST', '/api/v1/push', {
      token: await token({ roles: ['read-write'], tenant: 'acme' }),
      body: { items: [{ queue: 'q', payload: 1 }] },
      headers: { 'x-request-id': 'after-quiet' },
    });
    await treeOf('after-quiet', 2);
    expect(receiver.spans.filter((s) => s.attributes['queen.request_id'] === 'quiet-1')).toEqual([]);
    expect(await metric('queen_edge_trace_spans_total', '{outcome="exported"}')).toBeGreaterThan(0);
  });
});

describe('a wait for a broker slot', () => {
  it("is a span of the request that waited for its tenant's share of a shared broker's pool", async () => {
    const shared = await startBrokerDouble({ name: 'shared' });
    const slots = await startOtlpReceiver();
    const edge = await startEdge(
      testConfig([shared.url], {
        upstream: { connections: 4, tenantShare: 0.25, requestTimeoutMs: 1000 },
        tenants: { acme: { tenancyAwareBrokers: true } },
        tracing: { enabled: true, endpoint: slots.url, exportDelayMs: 20 },
      }),
    );
    try {
      // The first request holds the tenant's one slot until the edge gives up on it.
      shared.faultWhen((r) => (r.headers['x-request-id'] === 'holder' ? 'hang' : null));
      const tok = await token({ roles: ['read-write'], tenant: 'acme' });
      const push = (id: string) =>
        call(edge, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: 1 }] }, headers: { 'x-request-id': id } });
      const holder = push('holder');
      await shared.waitForRequests(1, (r) => r.headers['x-request-id'] === 'holder');
      // The waiter gets the slot when the edge gives up on the holder, or is refused when its own
      // wait (as long) ends first: either way it waited, and its span says which.
      const waiter = await push('waiter');
      expect([201, 429]).toContain(waiter.status);
      expect((await holder).status).toBe(504);
      const server = await waitForValue(
        () => slots.spans.find((s) => s.kind === SPAN_KIND.server && s.attributes['queen.request_id'] === 'waiter'),
        5000,
        "the waiter's server span",
      );
      const wait = await waitForValue(
        () => slots.spans.find((s) => s.parentSpanId === server.spanId && s.name === 'broker.slot_wait'),
        5000,
        'the slot wait span',
      );
      expect(wait.attributes).toMatchObject({ 'server.address': '127.0.0.1', 'queen.slot.granted': waiter.status === 201 });
      expect(Number(wait.endNs - wait.startNs) / 1e6).toBeGreaterThan(100);
      const client = slots.spans.find((s) => s.parentSpanId === server.spanId && s.kind === SPAN_KIND.client);
      // The broker is called only once the slot is had.
      if (waiter.status === 201) expect(client!.startNs >= wait.endNs).toBe(true);
      else expect(client).toBeUndefined();
    } finally {
      await edge.close();
      await slots.close();
      await shared.close();
    }
  });
});

describe('a collector that is down or slow', () => {
  it('costs the requests nothing: spans fail or are dropped and counted, the answers come as usual', async () => {
    const slow = await startOtlpReceiver();
    slow.hang(true);
    const edge = await startEdge(
      testConfig([broker.url], { tracing: { enabled: true, endpoint: slow.url, maxQueueSpans: 4, batchSpans: 2, exportDelayMs: 10, exportTimeoutMs: 60_000 } }),
    );
    try {
      const tok = await token({ roles: ['read-write'], tenant: 'acme' });
      for (let i = 0; i < 10; i++) {
        const r = await call(edge, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: i }] } });
        expect(r.status).toBe(201);
      }
      const text = async (): Promise<string> => (await request(`${edge.adminUrl}/metrics`)).body.text();
      await waitFor(async () => /queen_edge_trace_spans_total\{outcome="dropped"\} [1-9]/.test(await text()), 5000, 'dropped spans counted');
      expect(await text()).toMatch(/queen_edge_trace_spans_queued 4\b/);
      expect(slow.requests).toBeGreaterThan(0);
    } finally {
      await edge.close();
      await slow.close();
    }
  });

  it('a collector refusing connections: requests are answered and the failed spans counted', async () => {
    const gone = await startOtlpReceiver();
    const url = gone.url;
    await gone.close();
    const edge = await startEdge(testConfig([broker.url], { tracing: { enabled: true, endpoint: url, exportDelayMs: 10, exportTimeoutMs: 2000 } }));
    try {
      const tok = await token({ roles: ['read-write'], tenant: 'acme' });
      const r = await call(edge, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: 1 }] } });
      expect(r.status).toBe(201);
      const text = async (): Promise<string> => (await request(`${edge.adminUrl}/metrics`)).body.text();
      await waitFor(async () => /queen_edge_trace_spans_total\{outcome="failed"\} [1-9]/.test(await text()), 10_000, 'failed spans counted');
    } finally {
      await edge.close();
    }
  });
});
