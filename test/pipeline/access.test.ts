/** Role sets against access sets, tenancy and tenant gates, through the edge. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let other: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'acme' });
  other = await startBrokerDouble({ name: 'globex' });
  edge = await startEdge(
    testConfig([broker.url], {
      plans: { test: TEST_PLAN, pro: { ...TEST_PLAN, features: ['traces', 'analytics'] } },
      tenants: {
        // globex and frozen share one broker double: declared tenancy-aware, as a shared broker must be.
        globex: { plan: 'pro', hosts: ['globex.localhost'], brokers: [other.url], tenancyAwareBrokers: true },
        frozen: { plan: 'test', status: 'suspended', hosts: ['frozen.localhost'], brokers: [other.url], tenancyAwareBrokers: true },
      },
    }),
  );
});
afterAll(async () => {
  await edge.close();
  await broker.close();
  await other.close();
});

const ROUTES = {
  push: ['POST', '/api/v1/push', { items: [{ queue: 'q', payload: 1 }] }],
  pop: ['GET', '/api/v1/pop/queue/q', undefined],
  ack: ['POST', '/api/v1/ack', { transactionId: 't', partitionId: 'p', leaseId: 'l' }],
  read: ['GET', '/api/v1/resources/queues', undefined],
  admin: ['DELETE', '/api/v1/resources/queues/q', undefined],
} as const;

const ALLOWED: Record<string, (keyof typeof ROUTES)[]> = {
  'read-only': ['read'],
  'write-only': ['push'],
  'read-write': ['push', 'pop', 'ack', 'read'],
  admin: ['read', 'admin'],
  none: [],
};

describe('role matrix (sets, not a ladder)', () => {
  for (const [role, allowed] of Object.entries(ALLOWED)) {
    for (const [name, [method, path, body]] of Object.entries(ROUTES)) {
      const expectAllowed = allowed.includes(name as keyof typeof ROUTES);
      it(`${role} on ${name}: ${expectAllowed ? 'forwarded' : '403 forbidden'}`, async () => {
        const t = await token({ roles: role === 'none' ? [] : [role], tenant: 'acme' });
        const before = forwarded(broker).length;
        const r = await call(edge, method, path, { token: t, body });
        if (expectAllowed) {
          expect(r.status).not.toBe(401);
          expect(r.status).not.toBe(403);
          expect(forwarded(broker).length).toBe(before + 1);
          expect(forwarded(broker).at(-1)!.path).toBe(path);
        } else {
          expect(r.status).toBe(403);
          expect(r.json).toEqual({ error: expect.any(String), code: 'forbidden' });
          expect(forwarded(broker).length).toBe(before);
        }
      });
    }
  }

  it('reads roles from one claim only: `role` counts only without `roles`, and never widens it', async () => {
    // A lone `role` is read as the broker reads it (auth.roleClaim); write-only does not pop.
    const alone = await token({ role: 'write-only', tenant: 'acme' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: alone })).status).toBe(403);
    const before = forwarded(broker).length;
    const widened = await token({ roles: ['read-only'], role: 'admin', tenant: 'acme' });
    expect((await call(edge, 'DELETE', '/api/v1/resources/queues/q', { token: widened })).status).toBe(403);
    expect(forwarded(broker).length).toBe(before);
  });
});

describe('authentication', () => {
  it('no token: 401 unauthorized with WWW-Authenticate, nothing forwarded', async () => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q');
    expect(r.status).toBe(401);
    expect(r.headers['www-authenticate']).toBe('Bearer');
    expect(r.json).toEqual({ error: expect.any(String), code: 'unauthorized' });
    expect(forwarded(broker).length).toBe(before);
  });

  it('accepts a bare token without "Bearer "', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await call(edge, 'GET', '/api/v1/pop/queue/empty', { headers: { authorization: t } });
    expect(r.status).toBe(204);
  });

  it('a malformed header is 401, whether or not its token part was verified before; nothing forwarded', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'acme' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/empty', { token: t })).status).toBe(204);
    const before = forwarded(broker).length;
    for (const authorization of [`Bearer ${t} x`, `Bearer "${t}"`, `Basic ${t}`, 'Bearer', 'Bearer a b']) {
      const r = await call(edge, 'GET', '/api/v1/pop/queue/empty', { headers: { authorization } });
      expect([authorization, r.status, r.json]).toEqual([authorization, 401, { error: expect.any(String), code: 'unauthorized' }]);
    }
    expect(forwarded(broker).length).toBe(before);
  });

  it('a token signed with another secret, or expired, is 401', async () => {
    expect(
      (
        await call(edge, 'GET', '/api/v1/pop/queue/q', {
          token: await token({ roles: ['read-write'], tenant: 'acme' }, 'wrong-secret-wrong-secret-wrong-secret'),
        })
      ).status,
    ).toBe(401);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await token({ roles: ['read-write'], tenant: 'acme' }, undefined, '-2m') })).status).toBe(
      401,
    );
  });
});

describe('tenancy', () => {
  it("a token for acme on globex's host is refused and never reaches either broker", async () => {
    const t = await token({ roles: ['read-write'], tenant: 'acme' });
    const [a, g] = [forwarded(broker).length, forwarded(other).length];
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, host: 'globex.localhost' });
    expect(r.status).toBe(403);
    expect((r.json as { code: string }).code).toBe('forbidden');
    expect([forwarded(broker).length, forwarded(other).length]).toEqual([a, g]);
  });

  it('the tenant claim picks the tenant when the host names none', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'globex' });
    const g = forwarded(other).length;
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, host: '127.0.0.1' });
    expect(r.status).toBe(204);
    expect(forwarded(other).length).toBe(g + 1);
  });

  it('no tenant from host or claim, and no defaultTenant: 403', async () => {
    const t = await token({ roles: ['read-write'] });
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, host: 'unknown.localhost' });
    expect(r.status).toBe(403);
  });

  it('an unknown tenant in the claim: 403', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'nobody' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, host: '127.0.0.1' })).status).toBe(403);
  });
});

describe('tenant gates', () => {
  it('a suspended tenant answers 403 cluster_suspended', async () => {
    const t = await token({ roles: ['read-write'], tenant: 'frozen' });
    const r = await call(edge, 'POST', '/api/v1/push', { token: t, host: 'frozen.localhost', body: { items: [] } });
    expect(r.status).toBe(403);
    expect((r.json as { code: string }).code).toBe('cluster_suspended');
  });

  it('a route whose feature is not in the plan answers 403 feature_gated; in the plan it is forwarded', async () => {
    const acme = await token({ roles: ['read-only'], tenant: 'acme' });
    const gated = await call(edge, 'GET', '/api/v1/traces/q/p', { token: acme });
    expect(gated.status).toBe(403);
    expect((gated.json as { code: string }).code).toBe('feature_gated');
    const globex = await token({ roles: ['read-only'], tenant: 'globex' });
    const before = forwarded(other).length;
    await call(edge, 'GET', '/api/v1/traces/q/p', { token: globex, host: 'globex.localhost' });
    expect(forwarded(other).length).toBe(before + 1);
  });
});
