/**
 * Admin writes judged by the one tenant directory build, through real sockets: a host another
 * tenant lists is a 409, brokers removed by a write stop being probed, the view shows only
 * records the directory accepted, and a tenant can be given its own identity provider.
 */
import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { directoryKeys } from '../../src/redis/keys.js';
import type { DirectoryChange } from '../../src/tenants/store.js';
import { startBrokerDouble, type BrokerDouble, type RecordedRequest } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
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
    // b1 is shared by every tenant on it, so each declares it tenancy-aware; b2 and b3 are dedicated.
    tenants: {
      acme: { tenancyAwareBrokers: true },
      globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [b1.url], tenancyAwareBrokers: true, cors: { origins: ['https://globex.example'] } },
    },
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
const tenantBody = (hosts: string[], brokers: string[], extra: Record<string, unknown> = {}) => ({
  plan: 'test',
  hosts,
  brokers,
  ...(brokers.includes(b1.url) ? { tenancyAwareBrokers: true } : {}),
  ...extra,
});

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

describe('tenant ids are unique regardless of case', () => {
  it('a PUT of an id that differs from a tenant in force only in case is 409 naming both, and changes nothing', async () => {
    const twin = await admin(edge, 'PUT', '/admin/v1/tenants/ACME', { body: tenantBody(['twin.localhost'], [b3.url]) });
    expect(twin.status).toBe(409);
    expect(twin.json).toMatchObject({ code: 'conflict' });
    expect(twin.json.problems).toEqual([
      expect.stringMatching(/^(would displace tenant "acme": )?id: tenant "(ACME|acme)" differs from tenant "(acme|ACME)" only in case/),
    ]);
    expect((await admin(edge, 'GET', '/admin/v1/tenants/ACME')).status).toBe(404);
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await token({ roles: ['read-write'], tenant: 'acme' }), host: 'acme.localhost' });
    expect(r.status).toBe(204);
  });
});

describe('a write never displaces a tenant in force', () => {
  it('a record whose id sorts first cannot take the host of a record in force: 409, and the holder stays', async () => {
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/zz-holder', { body: tenantBody(['held.localhost'], [b1.url]) })).status).toBe(200);
    const taker = await admin(edge, 'PUT', '/admin/v1/tenants/aa-taker', { body: tenantBody(['held.localhost'], [b1.url]) });
    expect(taker.status).toBe(409);
    expect(taker.json.problems).toEqual(['would displace tenant "zz-holder": hosts: host "held.localhost" is already listed by tenant "aa-taker"']);
    expect((await admin(edge, 'GET', '/admin/v1/tenants/zz-holder')).status).toBe(200);
    expect((await admin(edge, 'GET', '/admin/v1/tenants/aa-taker')).status).toBe(404);
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

describe('brokers follow the directory by URL', () => {
  it('a PUT bringing a new broker, then one moving off it, tells the URLs alone: no pass over the tenants, on the PUTs or the probes', async () => {
    const b4 = await startBrokerDouble();
    try {
      const changes: DirectoryChange[] = [];
      const off = edge.app.tenants.onChange((c) => changes.push(c));
      // Every pass over the tenants reads this iterator: none may happen from here on.
      const all = vi.spyOn(edge.app.tenants, 'all');
      const rw = await token({ roles: ['read-write'], tenant: 'zeta' });
      expect((await admin(edge, 'PUT', '/admin/v1/tenants/zeta', { body: tenantBody(['zeta.localhost'], [b4.url]) })).status).toBe(200);
      expect(changes.at(-1)!.brokers).toEqual({ added: [b4.url], removed: [] });
      expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: rw, host: 'zeta.localhost' })).status).toBe(204);
      await b4.waitForRequests(2, isProbe, 10_000);

      // zeta moves to b1, which acme and globex list too: b4 goes, b1 stays.
      expect((await admin(edge, 'PUT', '/admin/v1/tenants/zeta', { body: tenantBody(['zeta.localhost'], [b1.url]) })).status).toBe(200);
      expect(changes.at(-1)!.brokers).toEqual({ added: [], removed: [b4.url] });
      expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: rw, host: 'zeta.localhost' })).status).toBe(204);
      const before = probes(b4);
      const b1From = probes(b1);
      await b1.waitForRequests(b1From + 3, isProbe, 10_000);
      expect(probes(b4)).toBeLessThanOrEqual(before + 1); // at most one probe already in flight
      expect((await admin(edge, 'GET', '/readyz', { token: null })).status).toBe(200);
      const up = (await admin(edge, 'GET', '/metrics', { token: null })).text.split('\n').filter((l) => l.startsWith('queen_edge_broker_up{'));
      expect(up.some((l) => l.includes(b1.url))).toBe(true);
      expect(up.some((l) => l.includes(b4.url))).toBe(false);
      expect(all).not.toHaveBeenCalled();
      all.mockRestore();
      off();
    } finally {
      await b4.close();
    }
  });
});

describe('the admin view', () => {
  it('shows the record in force, not a Redis record the directory rejected', async () => {
    const k = directoryKeys(prefix);
    const rejected = JSON.stringify({
      plan: 'gold',
      hosts: ['globex.localhost'],
      brokers: [b1.url],
      tenancyAwareBrokers: true,
      cors: { origins: ['https://rejected.example'] },
    });
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
    const put = await admin(edge, 'PUT', '/admin/v1/tenants/delta', {
      body: tenantBody(['delta.localhost'], [b1.url], { auth: { secret, issuer: 'https://idp.delta.example' } }),
    });
    expect(put.status).toBe(200);
    expect(put.json.auth).toMatchObject({ secret: '(set)', issuer: 'https://idp.delta.example' });
    expect(JSON.stringify(captured.lines)).not.toContain(secret);
    const now = Math.floor(Date.now() / 1000);
    const own = await signToken({ sub: 'd1', roles: ['read-write'], iss: 'https://idp.delta.example', iat: now, exp: now + 600 }, secret, { alg: 'HS256' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: own, host: 'delta.localhost' })).status).toBe(204);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: own, host: 'acme.localhost' })).status).toBe(401);
    const global = await token({ roles: ['read-write'], tenant: 'delta' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: global, host: 'delta.localhost' })).status).toBe(401);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/delta', { body: tenantBody(['delta.localhost'], [b1.url], { auth: { issuer: 'x' } }) })).status).toBe(
      400,
    );
  });
});

describe('a broker is dedicated to one tenant unless declared tenancy-aware', () => {
  it('a PUT on a broker another tenant lists is 409 naming both, whatever the URL spelling; declared on both, it is shared', async () => {
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/solo', { body: tenantBody(['solo.localhost'], [b2.url]) })).status).toBe(200);
    const same = `http://LOCALHOST:${new URL(b2.url).port}/`;
    const refused = await admin(edge, 'PUT', '/admin/v1/tenants/lodger', { body: tenantBody(['lodger.localhost'], [same]) });
    expect(refused.status).toBe(409);
    expect(refused.json.code).toBe('conflict');
    expect(refused.json.problems).toHaveLength(1);
    // Named from either side: the write would displace solo (records clash by id order).
    expect(refused.json.problems[0]).toMatch(
      /^(would displace tenant "solo": )?brokers: tenant "(lodger|solo)" and tenant "(solo|lodger)" both list broker .*set tenancyAwareBrokers: true on tenant "(lodger|solo)" and tenant "(solo|lodger)"/,
    );
    // Declaring it on one side is not enough: solo's requests would reach it without x-queen-tenant.
    const half = await admin(edge, 'PUT', '/admin/v1/tenants/lodger', { body: tenantBody(['lodger.localhost'], [same], { tenancyAwareBrokers: true }) });
    expect(half.status).toBe(409);
    expect(half.json.problems[0]).toContain('set tenancyAwareBrokers: true on tenant "solo" (docs/tenancy.md)');
    expect((await admin(edge, 'GET', '/admin/v1/tenants/lodger')).status).toBe(404);
    // b1 is declared by every tenant on it: one more that does not declare it is refused too.
    expect(
      (await admin(edge, 'PUT', '/admin/v1/tenants/lodger', { body: tenantBody(['lodger.localhost'], [b1.url], { tenancyAwareBrokers: false }) })).status,
    ).toBe(409);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/solo', { body: tenantBody(['solo.localhost'], [b2.url], { tenancyAwareBrokers: true }) })).status).toBe(
      200,
    );
    const shared = await admin(edge, 'PUT', '/admin/v1/tenants/lodger', { body: tenantBody(['lodger.localhost'], [same], { tenancyAwareBrokers: true }) });
    expect(shared.status).toBe(200);
    expect(shared.json).toMatchObject({ id: 'lodger', brokers: [same.replace(/\/+$/, '')], tenancyAwareBrokers: true });
  });

  it('a PUT naming by its host name a broker another tenant lists by address is 409: names are resolved before the write is judged', async () => {
    // The machine's own name: resolved by the system resolver, as the edge's connections are.
    const name = hostname().toLowerCase();
    const { address } = (await lookup(name, { all: true }))[0]!;
    expect(name === 'localhost' || name.endsWith('.localhost'), 'a host name that is not a loopback spelling').toBe(false);
    const b4 = await startBrokerDouble();
    try {
      const port = new URL(b4.url).port;
      const literal = `http://${address.includes(':') ? `[${address}]` : address}:${port}`;
      expect((await admin(edge, 'PUT', '/admin/v1/tenants/by-address', { body: tenantBody(['by-address.localhost'], [literal]) })).status).toBe(200);
      const aliased = await admin(edge, 'PUT', '/admin/v1/tenants/by-name', { body: tenantBody(['by-name.localhost'], [`http://${name}:${port}`]) });
      expect(aliased.status).toBe(409);
      expect(aliased.json.problems).toEqual([
        expect.stringMatching(
          new RegExp(
            `^(would displace tenant "by-address": )?brokers: tenant "by-(name|address)" and tenant "by-(address|name)" both list broker .*, address [^)]+:${port}\\)`,
          ),
        ),
      ]);
      expect((await admin(edge, 'GET', '/admin/v1/tenants/by-name')).status).toBe(404);
    } finally {
      await admin(edge, 'DELETE', '/admin/v1/tenants/by-address');
      await b4.close();
    }
  });

  it("requests of a tenant on declared brokers carry x-queen-tenant with its id, replacing the client's", async () => {
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', {
      token: await token({ roles: ['read-write'], tenant: 'acme' }),
      headers: { 'x-queen-tenant': 'globex' },
    });
    expect(r.status).toBe(204);
    const seen = b1.requests.filter((x) => x.headers['x-request-id'] === r.headers['x-request-id']);
    expect(seen.map((x) => x.headers['x-queen-tenant'])).toEqual(['acme']);
  });

  it('a host longer than 253 characters is refused (400), a 200,000-character one too', async () => {
    for (const host of [`${'h'.repeat(250)}.localhost`, 'h'.repeat(200_000)]) {
      const r = await admin(edge, 'PUT', '/admin/v1/tenants/longhost', { body: tenantBody([host], [b3.url]) });
      expect(r.status).toBe(400);
      expect(r.json.problems).toEqual(['hosts.0: a host name is at most 253 characters']);
    }
    expect((await admin(edge, 'GET', '/admin/v1/tenants/longhost')).status).toBe(404);
  });

  it('a broker URL with a path, query or fragment is refused (400) with the reason: no upstream client could open it', async () => {
    for (const broker of [`${b3.url}/queen`, `${b3.url}/?x=1`]) {
      const r = await admin(edge, 'PUT', '/admin/v1/tenants/pathbroker', { body: tenantBody(['pathbroker.localhost'], [broker]) });
      expect(r.status).toBe(400);
      expect(r.json.problems).toEqual([
        'brokers.0: a broker URL is scheme://host[:port] only, without a path, query or fragment: the edge sends each request its own path',
      ]);
    }
    expect((await admin(edge, 'GET', '/admin/v1/tenants/pathbroker')).status).toBe(404);
  });
});

describe('the plan list', () => {
  it('counts the tenants on each plan through creates, plan changes, suspensions and deletes, without a pass over the tenants', async () => {
    const onTest = () => [...edge.app.tenants.all()].filter((t) => t.plan.id === 'test').length;
    const listed = async () =>
      Object.fromEntries(((await admin(edge, 'GET', '/admin/v1/plans')).json.plans as Array<{ id: string; tenants: number }>).map((p) => [p.id, p.tenants]));
    const plan = (await admin(edge, 'GET', '/admin/v1/plans/test')).json;
    const { id: _id, ...testPlan } = plan;
    expect((await admin(edge, 'PUT', '/admin/v1/plans/counted', { body: testPlan })).status).toBe(200);
    const start = onTest();
    // Every pass over the tenants reads this iterator: none may happen from here on.
    const all = vi.spyOn(edge.app.tenants, 'all');
    try {
      expect(await listed()).toEqual({ test: start });
      const put = async (id: string, planId: string) =>
        expect((await admin(edge, 'PUT', `/admin/v1/tenants/${id}`, { body: tenantBody([`${id}.localhost`], [b1.url], { plan: planId }) })).status).toBe(200);
      await put('plan-a', 'test');
      await put('plan-b', 'counted');
      expect(await listed()).toEqual({ test: start + 1, counted: 1 });
      await put('plan-a', 'counted');
      expect(await listed()).toEqual({ test: start, counted: 2 });
      expect((await admin(edge, 'POST', '/admin/v1/tenants/plan-b/suspend')).status).toBe(200);
      // A plan record changed: every tenant on it is placed again, and counted once.
      expect((await admin(edge, 'PUT', '/admin/v1/plans/counted', { body: { ...testPlan, features: ['kv'] } })).status).toBe(200);
      expect(await listed()).toEqual({ test: start, counted: 2 });
      expect((await admin(edge, 'DELETE', '/admin/v1/tenants/plan-b')).status).toBe(204);
      expect(await listed()).toEqual({ test: start, counted: 1 });
      expect((await admin(edge, 'DELETE', '/admin/v1/tenants/plan-a')).status).toBe(204);
      // A plan of no file and no tenant is not listed (as before).
      expect(await listed()).toEqual({ test: start });
      expect(all).not.toHaveBeenCalled();
    } finally {
      all.mockRestore();
    }
    expect(onTest()).toBe(start);
  });
});
