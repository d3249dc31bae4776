/**
 * HMAC secrets compared as HMAC keys, and tenant secrets long enough not to be guessed, through the
 * admin listener and the edge: `<global secret>\0` is the global key (HMAC zero-pads a short key),
 * so a record naming it is a 409, and the shared issuer's claimless tokens never act for it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hmacKeys } from '../../src/auth/key-trust.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, TEST_SECRET, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

describe('hmacKeys', () => {
  it('a secret and the same secret zero-padded are one key, per HMAC algorithm', () => {
    expect(hmacKeys(`${TEST_SECRET}\0\0`)).toEqual(hmacKeys(TEST_SECRET));
    expect(hmacKeys(`${TEST_SECRET}x`)).not.toEqual(hmacKeys(TEST_SECRET));
    // Past HS256's 64-byte block the padding no longer reaches its key (hashed), but still HS512's (128).
    const long = 'k'.repeat(100);
    const [hs256, hs384, hs512] = hmacKeys(`${long}\0`);
    expect(hs256).not.toBe(hmacKeys(long)[0]);
    expect([hs384, hs512]).toEqual(hmacKeys(long).slice(1));
  });
});

describe('through the admin API and the edge', () => {
  const prefix = uniquePrefix();
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  let redis: Awaited<ReturnType<typeof connectTest>>;
  let port = 9;
  const unusedBroker = (): string[] => [`http://127.0.0.1:${port++}`];

  beforeAll(async () => {
    [broker, redis] = await Promise.all([startBrokerDouble(), connectTest(SHARED_REDIS_URL)]);
    edge = await startEdge(
      testConfig([broker.url], { redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 }, server: { admin: { token: ADMIN_TOKEN } } }),
    );
  });
  afterAll(async () => {
    await edge.close();
    await broker.close();
    await flushPrefix(redis, prefix);
    redis.disconnect();
  });

  const put = (id: string, secret: string) =>
    admin(edge, 'PUT', `/admin/v1/tenants/${id}`, { body: { plan: 'test', hosts: [`${id}.localhost`], brokers: unusedBroker(), auth: { secret } } });

  it("a record whose secret is the global one zero-padded is 409: the shared issuer's claimless tokens would act for it", async () => {
    const padded = await put('padded', `${TEST_SECRET}\0`);
    expect(padded.status).toBe(409);
    expect(padded.json.problems).toEqual(['auth: trusts the same tokens as the global auth settings (same key, no distinct issuer or audience)']);
    const claimless = await token({ sub: 'root', roles: ['read-write'] });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: claimless, host: 'padded.localhost' })).status).toBe(403);
  });

  it('a tenant secret shorter than 32 bytes is refused with its path, in a record and in the file', async () => {
    const short = await put('short', 'x'.repeat(31));
    expect(short.status).toBe(400);
    expect(short.json.problems).toEqual(["auth.secret: a tenant's HMAC secret needs at least 32 bytes"]);
    expect((await put('long-enough', 'y'.repeat(32))).status).toBe(200);
    expect(() => testConfig([broker.url], { tenants: { short: { plan: 'test', brokers: unusedBroker(), auth: { secret: 'z'.repeat(31) } } } })).toThrow(
      /tenants\.short\.auth\.secret: a tenant's HMAC secret needs at least 32 bytes/,
    );
  });
});
