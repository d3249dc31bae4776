/**
 * One reading: the broker acts on exactly what the edge checked (docs/security.md). Through real
 * sockets, against a broker double that reads queries the way broker 0.15.1 does (the first
 * `name=` anywhere in the raw query).
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { createTenantStore, type TenantStore } from '../../src/tenants/store.js';
import { brokerQueryParam, startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

const ALL_FEATURES = ['streams', 'traces', 'kv', 'timers', 'ephemeral', 'analytics'];
const codeOf = (r: Reply) => (r.json as { code?: string } | undefined)?.code;
const rawQuery = (url: string) => (url.includes('?') ? url.slice(url.indexOf('?') + 1) : '');

describe('queries, headers and routes', () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  let rw: string;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    edge = await startEdge(
      testConfig([broker.url], {
        server: { longPoll: { defaultTimeoutMs: 50, maxTimeoutMs: 200, slackMs: 5000 } },
        plans: {
          test: {
            ...TEST_PLAN,
            features: ALL_FEATURES,
            limits: { ...TEST_PLAN.limits, maxBatch: 50, messagesPerSec: 0.001, messageBurst: 3 },
            quotas: { ...TEST_PLAN.quotas, messagesPerMonth: 10 },
          },
        },
        // The double registers every route of the broker contract.
        tenants: { acme: { brokerVersion: 'contract' } },
      }),
    );
    rw = await token({ roles: ['read-write'], tenant: 'acme' });
  });
  afterAll(async () => {
    await edge?.close();
    await broker?.close();
  });

  it.each([
    ['xwait=true&xtimeout=600000&xbatch=5000', 'xwait'],
    ['await=true&wait=false', 'await'],
    ['batch=1&xtimeout=600000', 'xtimeout'],
  ])('a name the broker would read as a declared one (%s) is refused, naming it, and not forwarded', async (q, name) => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'GET', `/api/v1/pop/queue/q?${q}`, { token: rw });
    expect([r.status, codeOf(r)]).toEqual([400, 'invalid_request']);
    expect((r.json as { error: string }).error).toContain(`"${name}"`);
    expect(forwarded(broker).length).toBe(before);
  });

  it('partitions is bounded (at most the smaller of maxBatch and 100)', async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q?partitions=51', { token: rw });
    expect([r.status, codeOf(r)]).toEqual([400, 'invalid_request']);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q?partitions=50', { token: rw })).status).toBe(204);
  });

  it('the broker reads every forwarded parameter as the edge did: values with separators stay inside their pair', async () => {
    broker.requests.length = 0;
    // A malformed escape: a URL parser keeps `%4G` as text, the broker's decoder reads byte 4. Refused.
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q?consumerGroup=g%4G', { token: rw });
    expect([r.status, codeOf(r)]).toEqual([400, 'invalid_request']);
    expect(forwarded(broker)).toEqual([]);
    const ok = await call(edge, 'GET', '/api/v1/pop/queue/q?consumerGroup=g%26wait%3Dtrue%26timeout%3D600000+x&batch=2&wait=true&timeout=999999', {
      token: rw,
    });
    expect(ok.status).toBe(204);
    const [sent] = forwarded(broker);
    const q = rawQuery(sent!.url);
    expect([brokerQueryParam(q, 'consumerGroup'), brokerQueryParam(q, 'batch'), brokerQueryParam(q, 'wait'), brokerQueryParam(q, 'timeout')]).toEqual([
      'g&wait=true&timeout=600000 x',
      '2',
      'true',
      '200',
    ]);
  });

  it('GET /api/v1/pop (no broker up to 0.15.1 answers it) takes no parked slot: wait is forwarded false', async () => {
    broker.requests.length = 0;
    const r = await call(edge, 'GET', '/api/v1/pop?namespace=none&wait=true&timeout=600000', { token: rw });
    expect(r.status).toBe(204);
    expect(brokerQueryParam(rawQuery(forwarded(broker)[0]!.url), 'wait')).toBe('false');
  });

  it('a route that takes no parameters refuses one', async () => {
    const r = await call(edge, 'GET', '/api/v1/resources/queues/q?wait=true', { token: rw });
    expect([r.status, codeOf(r)]).toEqual([400, 'invalid_request']);
  });

  it('asks the broker for identity encoding whatever the client accepts', async () => {
    broker.requests.length = 0;
    const r = await call(edge, 'GET', '/api/v1/resources/queues', { token: rw, headers: { 'accept-encoding': 'gzip, br' } });
    expect(r.status).toBe(200);
    expect(forwarded(broker)[0]!.headers['accept-encoding']).toBe('identity');
  });

  it('refuses a compressed request body, also on a route whose body is streamed, and forwards nothing', async () => {
    const before = forwarded(broker).length;
    for (const path of ['/api/v1/configure', '/api/v1/push']) {
      const r = await call(edge, 'POST', path, { token: rw, body: '{}', headers: { 'content-encoding': 'gzip' } });
      expect([r.status, codeOf(r), (r.json as { error: string }).error]).toEqual([400, 'invalid_request', expect.stringContaining('Content-Encoding')]);
    }
    expect(forwarded(broker).length).toBe(before);
    const plain = await call(edge, 'POST', '/api/v1/configure', { token: rw, body: { queue: 'plain' }, headers: { 'content-encoding': 'identity' } });
    expect(plain.status).toBe(200);
  });

  it('an ephemeral push counts its items as messages: the message rate, the monthly quota and maxBatch apply', async () => {
    const items = (n: number) => ({ items: Array.from({ length: n }, (_, i) => ({ queue: 'eph', payload: i })) });
    const before = forwarded(broker).length;
    const over = await call(edge, 'POST', '/api/v1/ephemeral/push', { token: rw, body: items(51) });
    expect([over.status, codeOf(over)]).toEqual([400, 'invalid_request']);
    const quota = await call(edge, 'POST', '/api/v1/ephemeral/push', { token: rw, body: items(11) });
    expect([quota.status, codeOf(quota)]).toEqual([429, 'quota_exceeded']);
    expect(forwarded(broker).length).toBe(before);
    // The burst (3) taken by one push, the next item waits for a rate of one per 1000 s.
    expect((await call(edge, 'POST', '/api/v1/ephemeral/push', { token: rw, body: items(3) })).status).toBe(404);
    const rate = await call(edge, 'POST', '/api/v1/ephemeral/push', { token: rw, body: items(1) });
    expect([rate.status, codeOf(rate)]).toEqual([429, 'rate_limited']);
  });
});

describe('storage gate on every write route', () => {
  const prefix = uniquePrefix();
  let broker: BrokerDouble;
  let redis: Redis;
  let edge: EdgeHarness;
  let admin: TenantStore;
  let rw: string;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    redis = await connectTest(SHARED_REDIS_URL);
    const config = testConfig([broker.url], {
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
      upstream: { healthIntervalMs: 1000, healthTimeoutMs: 2000, downAfter: 3 },
      plans: { test: { ...TEST_PLAN, features: ALL_FEATURES, storageBytes: 1000 } },
      tenants: { acme: { brokerVersion: 'contract' } },
    });
    edge = await startEdge(config);
    admin = await createTenantStore(config, { log: silentLogger() });
    rw = await token({ roles: ['read-write'], tenant: 'acme' });
  });
  afterAll(async () => {
    await admin?.close();
    await edge?.close();
    await broker?.close();
    if (redis) {
      await flushPrefix(redis, prefix);
      redis.disconnect();
    }
  });

  /** Records acme at its plan's storage and waits until the edge refuses a push for it. */
  async function overQuota(): Promise<void> {
    await admin.setStorageUsed('acme', 1000);
    await waitFor(
      async () => codeOf(await call(edge, 'POST', '/api/v1/push', { token: rw, body: { items: [{ queue: 'q', payload: 1 }] } })) === 'storage_quota_exceeded',
      3000,
      'the block to reach the edge',
    );
  }

  it.each([
    ['POST', '/api/v1/ephemeral/push', { items: [{ queue: 'e', payload: 1 }] }],
    ['PUT', '/api/v1/kv/k', { value: 1 }],
    ['POST', '/api/v1/traces', { traceName: 't' }],
    ['PUT', '/api/v1/timers/t1', { at: 1 }],
    ['POST', '/api/v1/timers/t1/fire', {}],
    ['POST', '/streams/v1/queries', {}],
    ['POST', '/streams/v1/cycle', {}],
    ['POST', '/api/v1/configure', { queue: 'q' }],
  ] as const)('over the storage quota, %s %s is refused 403 storage_quota_exceeded and not forwarded', async (method, path, body) => {
    await overQuota();
    const before = forwarded(broker).length;
    const r = await call(edge, method, path, { token: rw, body });
    expect([r.status, codeOf(r)]).toEqual([403, 'storage_quota_exceeded']);
    expect(forwarded(broker).length).toBe(before);
  });

  it('over the storage quota, deletes still reach the broker: they free storage', async () => {
    await overQuota();
    for (const path of ['/api/v1/kv/k', '/api/v1/timers/t1', '/api/v1/ephemeral/e1']) {
      const before = forwarded(broker).length;
      expect((await call(edge, 'DELETE', path, { token: rw })).status).toBe(404);
      expect(forwarded(broker).length).toBe(before + 1);
    }
  });
});
