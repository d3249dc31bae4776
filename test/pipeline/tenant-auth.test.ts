/**
 * Tenant-scoped tokens through real sockets: a token from the shared issuer without a tenant claim
 * is no key to every tenant, and two tenants with their own identity providers (two JWKS
 * endpoints) cannot use each other's tokens, whatever the token claims.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { epochSec, keyPair, signWith, type TestKeyPair } from '../helpers/tokens.js';

let broker: BrokerDouble;
let edge: EdgeHarness;
let idpA: JwksServer;
let idpB: JwksServer;
let keyA: TestKeyPair;
let keyB: TestKeyPair;

const ISS_A = 'https://idp.tenant-a.example';
const ISS_B = 'https://idp.tenant-b.example';

beforeAll(async () => {
  [keyA, keyB, broker] = await Promise.all([keyPair('RS256'), keyPair('ES256'), startBrokerDouble()]);
  [idpA, idpB] = await Promise.all([startJwksServer([keyA.publicJwk]), startJwksServer([keyB.publicJwk])]);
  const brokers = [broker.url];
  edge = await startEdge(
    testConfig(brokers, {
      // One broker double for all four tenants: declared tenancy-aware, as a shared broker must be.
      tenants: {
        acme: { tenancyAwareBrokers: true },
        globex: { plan: 'test', hosts: ['globex.localhost'], brokers, tenancyAwareBrokers: true },
        ta: { plan: 'test', hosts: ['a.localhost'], brokers, tenancyAwareBrokers: true, auth: { jwksUrl: idpA.url, issuer: ISS_A, audience: 'queen' } },
        tb: { plan: 'test', hosts: ['b.localhost'], brokers, tenancyAwareBrokers: true, auth: { jwksUrl: idpB.url, issuer: ISS_B } },
      },
    }),
  );
});

afterAll(async () => {
  await edge.close();
  await Promise.all([broker.close(), idpA.close(), idpB.close()]);
});

const pop = (tok: string, host: string) => call(edge, 'GET', '/api/v1/pop/queue/q', { token: tok, host });
const fresh = () => ({ iat: epochSec(Date.now()), exp: epochSec(Date.now()) + 600, sub: 'u1', roles: ['read-write'] });

describe('the shared issuer', () => {
  it('an admin token without a tenant claim is refused on every tenant host and reaches no broker', async () => {
    const skeleton = await token({ roles: ['admin'] });
    const before = forwarded(broker).length;
    // 403 where the global keys verify it but it names no tenant; 401 where only the tenant's own IdP counts.
    const expected = { 'acme.localhost': 403, 'globex.localhost': 403, 'a.localhost': 401, 'b.localhost': 401 };
    for (const [host, status] of Object.entries(expected)) {
      const r = await call(edge, 'DELETE', '/api/v1/resources/queues/q', { token: skeleton, host });
      expect([host, r.status]).toEqual([host, status]);
    }
    expect(forwarded(broker).length).toBe(before);
    // The same issuer's token naming the tenant still works.
    expect((await pop(await token({ roles: ['read-write'], tenant: 'acme' }), 'acme.localhost')).status).toBe(204);
  });

  it('a global-key token is refused by tenants with their own identity provider, even naming them', async () => {
    for (const [tenant, host] of [
      ['ta', 'a.localhost'],
      ['tb', 'b.localhost'],
      ['ta', '127.0.0.1'],
    ] as const) {
      const r = await pop(await token({ roles: ['admin'], tenant }), host);
      expect(r.status).toBe(401);
    }
  });
});

describe('tenants with their own identity providers', () => {
  it("each tenant accepts its own IdP's tokens, without a claim and by claim on a shared host", async () => {
    const before = forwarded(broker).length;
    expect((await pop(await signWith(keyA, { ...fresh(), iss: ISS_A, aud: 'queen' }), 'a.localhost')).status).toBe(204);
    expect((await pop(await signWith(keyB, { ...fresh(), iss: ISS_B }), 'b.localhost')).status).toBe(204);
    expect((await pop(await signWith(keyB, { ...fresh(), iss: ISS_B, tenant: 'tb' }), '127.0.0.1')).status).toBe(204);
    expect(forwarded(broker).length).toBe(before + 3);
  });

  it("a token of one tenant's IdP fails on another tenant's host, even claiming that tenant, and even once cached", async () => {
    const before = forwarded(broker).length;
    const fromA = await signWith(keyA, { ...fresh(), iss: ISS_A, aud: 'queen' });
    expect((await pop(fromA, 'a.localhost')).status).toBe(204); // verified and cached for ta
    const refused = [
      await pop(fromA, 'b.localhost'),
      await pop(await signWith(keyA, { ...fresh(), iss: ISS_B, tenant: 'tb' }), 'b.localhost'),
      await pop(await signWith(keyA, { ...fresh(), iss: ISS_B, tenant: 'tb' }), '127.0.0.1'),
      await pop(await signWith(keyB, { ...fresh(), iss: ISS_A, aud: 'queen', tenant: 'ta' }), 'a.localhost'),
      await pop(await signWith(keyB, { ...fresh(), iss: ISS_B }), 'acme.localhost'),
    ];
    expect(refused.map((r) => r.status)).toEqual([401, 401, 401, 401, 401]);
    expect(forwarded(broker).length).toBe(before + 1);
  });

  it("a host spelled with the trailing dot of a fully qualified name is the same tenant's host", async () => {
    // The token of ta's IdP carries no claim: only the host can pick ta, so 204 proves the dotted host resolved.
    expect((await pop(await signWith(keyA, { ...fresh(), iss: ISS_A, aud: 'queen' }), 'a.localhost.')).status).toBe(204);
    expect((await pop(await signWith(keyA, { ...fresh(), iss: ISS_A, aud: 'queen' }), 'A.LOCALHOST.:443')).status).toBe(204);
    // The skeleton-key rule holds on the dotted spelling too: a global token naming tb is refused on ta's host.
    expect((await pop(await token({ roles: ['admin'], tenant: 'tb' }), 'a.localhost.')).status).toBe(401);
  });

  it('a tenant IdP token naming another tenant is refused on its own host (403)', async () => {
    const r = await pop(await signWith(keyA, { ...fresh(), iss: ISS_A, aud: 'queen', tenant: 'tb' }), 'a.localhost');
    expect(r.status).toBe(403);
    expect(r.json).toEqual({ error: expect.any(String), code: 'forbidden' });
  });
});

describe('defaultTenant, the single-tenant convenience', () => {
  it('a token without a claim acts for the default tenant only, on its host or a host no tenant lists', async () => {
    const single = await startEdge(
      testConfig([broker.url], {
        auth: { defaultTenant: 'acme' },
        tenants: {
          acme: { tenancyAwareBrokers: true },
          globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
        },
      }),
    );
    try {
      const claimless = await token({ roles: ['read-write'] });
      const status = async (host: string) => (await call(single, 'GET', '/api/v1/pop/queue/q', { token: claimless, host })).status;
      expect([await status('acme.localhost'), await status('127.0.0.1'), await status('globex.localhost')]).toEqual([204, 204, 403]);
    } finally {
      await single.close();
    }
  });
});
