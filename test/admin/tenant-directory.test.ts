/**
 * Admin writes judged by the one tenant directory build, through real sockets: a host another
 * tenant lists is a 409, brokers removed by a write stop being probed, the view shows only
 * records the directory accepted, and a tenant can be given its own identity provider.
 */
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { directoryKeys } from '../../src/redis/keys.js';
import { startBrokerDouble, type BrokerDouble, type RecordedRequest } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix, waitFor } from '../helpers/redis.js';
import { signToken } from '../helpers/tokens.js';
import { admin } from './admin-call.js';

const prefix = uniquePrefix();
const captured = capturingLogger('warn');
let b1: BrokerDouble;
let b2: BrokerDouble;
let b3: BrokerDouble;
let edge: EdgeHarness;
let redis: Redis;

beforeAll(async () => {
  [b1, b2, b3] = await Promise.all([startBrokerDouble(), startBrokerDouble(), startBrokerDouble()]);
  redis = await connectTest(SHARED_REDIS_URL);
  const config = testConfig([b1.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
    server: { admin: { token: 'admin-token-for-tests-0123456789' } },
    tenants: { globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [b1.url], cors: { origins: ['https://globex.example'] } } },
  });
  edge = await startEdge(config, { log: captured.log });
});

afterAll(async () => {
  await edge.close();
  await Promise.all([b1.close(), b2.close(), b3.close()]);
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

const isProbe = (r: RecordedRequest) => r.path === '/health' && r.headers['x-request-id'] === undefined;
const probes = (b: BrokerDouble) => b.requests.filter(isProbe).length;
const tenantBody = (hosts: string[], brokers: string[], extra: Record<string, unknown> = {}) => ({ plan: 'test', hosts, brokers, ...extra });

describe('hosts are unique across tenants', () => {
  it('a PUT listing a host another tenant lists is 409 conflict and changes nothing', async () => {
    const taken = await admin(edge, 'PUT', '/admin/v1/tenants/intruder', { body: tenantBody(['new.localhost', 'ACME.localhost'], [b2.url]) });
    expect(taken.status).toBe(409);
    expect(taken.json).toEqual({ error: expect.any(String), code: 'conflict', problems: ['hosts: host "acme.localhost" is already listed by tenant "acme"'] });
    expect((await admin(edge, 'GET', '/admin/v1/tenants/intruder')).status).toBe(404);
    // Another record's host too, not only the file's.
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/first', { body: tenantBody(['first.localhost'], [b1.url]) })).status).toBe(200);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/second', { body: tenantBody(['first.localhost'], [b1.url]) })).status).toBe(409);
    // The host still reaches its tenant.
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await token({ roles: ['read-write'], tenant: 'acme' }), host: 'acme.localhost' });
    expect(r.status).toBe(204);
    // Moving a host: first release it, then claim it.
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/first', { body: tenantBody(['other.localhost'], [b1.url]) })).status).toBe(200);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/second', { body: tenantBody(['first.localhost'], [b1.url]) })).status).toBe(200);
  });
});

describe('brokers follow the directory', () => {
  it('a broker removed through the admin API is no longer probed nor listed', async () => {
    const rw = await token({ roles: ['read-write'], tenant: 'gamma' });
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/gamma', { body: tenantBody(['gamma.localhost'], [b2.url]) })).status).toBe(200);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: rw, host: 'gamma.localhost' })).status).toBe(204);
    await b2.waitForRequests(2, isProbe, 10_000);

    expect((await admin(edge, 'PUT', '/admin/v1/tenants/gamma', { body: tenantBody(['gamma.localhost'], [b3.url]) })).status).toBe(200);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: rw, host: 'gamma.localhost' })).status).toBe(204);
    const before = probes(b2);
    // Three probes of the new broker: several probe rounds went by without the old one.
    await b3.waitForRequests(3, isProbe, 10_000);
    expect(probes(b2)).toBeLessThanOrEqual(before + 1); // at most one probe already in flight
    const listed = (await admin(edge, 'GET', '/admin/v1/brokers')).json.clusters.flatMap((c: { brokers: { url: string }[] }) => c.brokers.map((b) => b.url));
    expect(listed).toContain(b3.url);
    expect(listed).not.toContain(b2.url);
  });
});

describe('the admin view', () => {
  it('shows the record in force, not a Redis record the directory rejected', async () => {
    const k = directoryKeys(prefix);
    const rejected = JSON.stringify({ plan: 'gold', hosts: ['globex.localhost'], brokers: [b1.url], cors: { origins: ['https://rejected.example'] } });
    await redis.multi().set(k.tenant('globex'), rejected).sadd(k.tenants, 'globex').exec();
    await redis.publish(k.changes, 'tenant:globex');
    await waitFor(() => captured.lines.some((l) => l.key === k.tenant('globex')), 3000, 'the store to judge the record');
    const view = await admin(edge, 'GET', '/admin/v1/tenants/globex');
    expect(view.json).toMatchObject({ plan: 'test', cors: { origins: ['https://globex.example'] } });
  });
});

describe('a tenant with its own identity provider, set through the admin API', () => {
  it('its tokens need no claim, the global key no longer serves it, and the secret is never shown', async () => {
    const secret = 'delta-own-secret-0123456789abcdef';
    const put = await admin(edge, 'PUT', '/admin/v1/tenants/delta', { body: tenantBody(['delta.localhost'], [b1.url], { auth: { secret, issuer: 'https://idp.delta.example' } }) });
    expect(put.status).toBe(200);
    expect(put.json.auth).toMatchObject({ secret: '(set)', issuer: 'https://idp.delta.example' });
    expect(JSON.stringify(captured.lines)).not.toContain(secret);
    const now = Math.floor(Date.now() / 1000);
    const own = await signToken({ sub: 'd1', roles: ['read-write'], iss: 'https://idp.delta.example', iat: now, exp: now + 600 }, secret, { alg: 'HS256' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: own, host: 'delta.localhost' })).status).toBe(204);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: own, host: 'acme.localhost' })).status).toBe(401);
    const global = await token({ roles: ['read-write'], tenant: 'delta' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: global, host: 'delta.localhost' })).status).toBe(401);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/delta', { body: tenantBody(['delta.localhost'], [b1.url], { auth: { issuer: 'x' } }) })).status).toBe(400);
  });
});
