/**
 * Fault injection through the edge: brokers that die, hang or answer garbage, and an
 * identity provider that is down. No crash, every client gets a documented status and code in
 * time, and no push is sent twice by the proxy.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { startJwksServer } from '../helpers/jwks-server.js';
import { keyPair, signWith } from '../helpers/tokens.js';
import { waitFor } from '../helpers/wait.js';

const DOCUMENTED_CODES = new Set(['bad_gateway', 'no_upstream', 'upstream_timeout']);

describe('a broker killed under load and restarted', () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    edge = await startEdge(testConfig([broker.url], { upstream: { healthIntervalMs: 100, upAfter: 1, requestTimeoutMs: 2000 } }));
  });
  afterAll(async () => {
    await edge.close();
    await broker.close();
  });

  it('every push gets 201 or a documented refusal, and none reaches the broker twice', async () => {
    const rw = await token({ roles: ['read-write'], tenant: 'acme' });
    const outcomes: { tx: string; status: number; code: string | null }[] = [];
    let n = 0;
    let stopped = false;
    const worker = async () => {
      while (!stopped) {
        const tx = `tx-${n++}`;
        const r = await call(edge, 'POST', '/api/v1/push', {
          token: rw,
          body: { items: [{ queue: 'load', partition: 'p', transactionId: tx, payload: { tx } }] },
        });
        outcomes.push({ tx, status: r.status, code: (r.json as { code?: string } | undefined)?.code ?? null });
      }
    };
    const load = Promise.all([worker(), worker(), worker(), worker()]);
    const since = (from: number, pred: (o: (typeof outcomes)[number]) => boolean) => outcomes.slice(from).filter(pred).length;
    // The broker dies while pushes flow, stays down until the edge has refused some, and comes
    // back under the same load.
    await waitFor(() => since(0, (o) => o.status === 201) >= 10, 10_000, 'pushes answered 201 before the kill');
    await broker.close();
    const killed = outcomes.length;
    await waitFor(() => since(killed, (o) => o.status !== 201) >= 4, 10_000, 'pushes refused while the broker is down');
    await broker.restart();
    // Traffic flows again once the health checker has seen the broker up.
    const restarted = outcomes.length;
    await waitFor(() => since(restarted, (o) => o.status === 201) >= 1, 10_000, 'a push answered 201 after the restart');
    stopped = true;
    await load;

    const refused = outcomes.filter((o) => o.status !== 201);
    for (const o of refused) {
      expect([502, 503, 504]).toContain(o.status);
      expect(DOCUMENTED_CODES.has(o.code ?? '')).toBe(true);
    }
    // Exactly once from the proxy's side: no transactionId was sent to the broker twice.
    const sent = forwarded(broker)
      .filter((q) => q.path === '/api/v1/push')
      .map((q) => (JSON.parse(q.body.toString()) as { items: { transactionId: string }[] }).items[0]!.transactionId);
    expect(new Set(sent).size).toBe(sent.length);
    for (const o of outcomes) if (o.status === 201) expect(sent).toContain(o.tx);
  });
});

describe('brokers that misbehave', () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  let rw: string;
  beforeAll(async () => {
    broker = await startBrokerDouble();
    // Health probes off the path: a one-shot fault must hit the proxied request, not a probe.
    edge = await startEdge(testConfig([broker.url], { upstream: { requestTimeoutMs: 800, downAfter: 1000, healthIntervalMs: 600000 } }));
    await broker.waitForRequests(1, (q) => q.path === '/health');
    rw = await token({ roles: ['read-write'], tenant: 'acme' });
  });
  afterAll(async () => {
    await edge.close();
    await broker.close();
  });

  it('a truncated body reaches the client as a broken response, not a hang, and the edge keeps serving', async () => {
    broker.fault('truncate', 1);
    const started = Date.now();
    const outcome = await request(`${edge.url}/api/v1/resources/queues`, {
      headers: { host: 'acme.localhost', authorization: `Bearer ${rw}` },
      dispatcher: edge.dispatcher,
    })
      .then((r) => r.body.text())
      .then(
        () => 'complete',
        () => 'broken',
      );
    expect(outcome).toBe('broken');
    expect(Date.now() - started).toBeLessThan(3000);
    expect((await call(edge, 'GET', '/health')).status).toBe(200);
  });

  it.each([
    ['hang', 504, 'upstream_timeout'],
    ['garbage', 502, 'bad_gateway'],
    ['reset', 502, 'bad_gateway'],
  ] as const)('%s: %i %s within the upstream timeout', async (fault, status, code) => {
    broker.fault(fault, 1);
    const started = Date.now();
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: [{ queue: 'q', payload: 1 }] } });
    expect([r.status, (r.json as { code: string }).code]).toEqual([status, code]);
    expect(Date.now() - started).toBeLessThan(3000);
  });

  it('a 5xx from the broker is relayed as it is', async () => {
    broker.fault({ status: 500 }, 1);
    const r = await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: [{ queue: 'q', payload: 1 }] } });
    expect(r.status).toBe(500);
  });
});

describe('the identity provider down', () => {
  it('JWKS down at start: 401 with a code, then tokens verify once it is back; stale keys served while it fails later', async () => {
    const pair = await keyPair('RS256');
    const jwks = await startJwksServer([pair.publicJwk]);
    jwks.failWith(503);
    const broker = await startBrokerDouble();
    const edge = await startEdge(testConfig([broker.url], { auth: { jwksUrl: jwks.url, algorithms: ['RS256'] } }));
    try {
      const t = await signWith(pair, { roles: ['read-write'], tenant: 'acme', sub: 's', exp: Math.floor(Date.now() / 1000) + 600 });
      const down = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t });
      expect([down.status, (down.json as { code: string }).code]).toEqual([401, 'unauthorized']);
      jwks.failWith(null);
      await expect.poll(async () => (await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t })).status, { timeout: 8000, interval: 250 }).toBe(204);
      jwks.failWith(500);
      const other = await signWith(pair, { roles: ['read-write'], tenant: 'acme', sub: 'other', exp: Math.floor(Date.now() / 1000) + 600 });
      expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: other })).status).toBe(204);
    } finally {
      await edge.close();
      await broker.close();
      await jwks.close();
    }
  });
});
