/** Reloading the configuration file without a restart: tenants, plans, routes and CORS swap together; an invalid file changes nothing. */
import { lookup } from 'node:dns/promises';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError } from '../../src/config/load.js';
import type { RawConfig } from '../../src/config/schema.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { keyPair, signWith, tempDir, type TestKeyPair } from '../helpers/tokens.js';

let broker: BrokerDouble;
let h: EdgeHarness;
let base: RawConfig;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'reload' });
  base = testConfig([broker.url]);
  h = await startEdge(base);
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
});

const preflight = (origin: string, host = 'acme.localhost') =>
  call(h, 'OPTIONS', '/api/v1/push', { host, headers: { origin, 'access-control-request-method': 'POST' } });
const push = async (tenant: string, roles: string[]) =>
  call(h, 'POST', '/api/v1/push', { host: `${tenant}.localhost`, token: await token({ roles, tenant }), body: { items: [{ queue: 'q', payload: 1 }] } });

describe('App.reload', () => {
  it('applies new tenants, plans, routes and CORS origins together; an invalid config keeps all of them', async () => {
    expect((await preflight('https://new.example')).status).toBe(403);
    expect((await push('beta', ['read-write'])).status).not.toBe(201);

    const next: RawConfig = {
      ...base,
      plans: { ...base.plans, small: { ...base.plans.test!, limits: { ...base.plans.test!.limits, maxBatch: 1 } } },
      tenants: {
        // beta joins acme's broker double: both declare it tenancy-aware, as a shared broker must be.
        acme: { ...base.tenants.acme!, tenancyAwareBrokers: true, cors: { origins: ['https://new.example'] } },
        beta: { ...base.tenants.acme!, tenancyAwareBrokers: true, plan: 'small', hosts: ['beta.localhost'], cors: { origins: [] } },
      },
      routes: { 'POST /api/v1/ack': ['admin'] },
    };
    await h.app.reload(next);

    expect((await preflight('https://new.example')).status).toBe(204);
    expect((await preflight('https://app.example.com')).status).toBe(403);
    const before = forwarded(broker).length;
    expect((await push('beta', ['read-write'])).status).toBe(201);
    expect(forwarded(broker).length).toBe(before + 1);
    // The new plan's batch limit applies to beta.
    const batch = await call(h, 'POST', '/api/v1/push', {
      host: 'beta.localhost',
      token: await token({ roles: ['read-write'], tenant: 'beta' }),
      body: {
        items: [
          { queue: 'q', payload: 1 },
          { queue: 'q', payload: 2 },
        ],
      },
    });
    expect(batch.json).toMatchObject({ code: 'invalid_request', error: "push of 2 items exceeds the plan's maximum of 1" });
    // The route override: ack now needs the admin role.
    const ack = await call(h, 'POST', '/api/v1/ack', {
      token: await token({ roles: ['read-write'], tenant: 'acme' }),
      body: { transactionId: 't', partitionId: 'p', leaseId: 'l' },
    });
    expect(ack.json).toMatchObject({ code: 'forbidden' });

    // A host listed twice: refused as a whole, nothing changes.
    const broken: RawConfig = { ...next, tenants: { ...next.tenants, gamma: { ...next.tenants.beta!, hosts: ['acme.localhost'] } }, routes: {} };
    await expect(h.app.reload(broken)).rejects.toThrow(ConfigError);
    expect((await preflight('https://new.example')).status).toBe(204);
    expect((await push('beta', ['read-write'])).status).toBe(201);
    expect((await call(h, 'POST', '/api/v1/ack', { token: await token({ roles: ['read-write'], tenant: 'acme' }), body: {} })).json).toMatchObject({
      code: 'forbidden',
    });

    // A tenant on a broker another lists without both declaring it tenancy-aware: refused, nothing changes.
    const shared: RawConfig = {
      ...next,
      tenants: { ...next.tenants, gamma: { ...next.tenants.beta!, hosts: ['gamma.localhost'], tenancyAwareBrokers: false } },
      routes: {},
    };
    await expect(h.app.reload(shared)).rejects.toThrow(/tenants\.gamma\.brokers: tenant "gamma" and tenant "acme" both list broker/);
    expect((await push('gamma', ['read-write'])).status).toBe(403);
    expect((await push('beta', ['read-write'])).status).toBe(201);

    // Two new tenants on one broker, one naming it by address, the other by the host name that resolves to it: refused too.
    const name = hostname().toLowerCase();
    const { address } = (await lookup(name, { all: true }))[0]!;
    const dedicated = (host: string, broker: string) => ({ ...next.tenants.beta!, hosts: [host], brokers: [broker], tenancyAwareBrokers: false });
    const aliased: RawConfig = {
      ...next,
      tenants: {
        ...next.tenants,
        gamma: dedicated('gamma.localhost', `http://${address.includes(':') ? `[${address}]` : address}:4`),
        delta: dedicated('delta.localhost', `http://${name}:4`),
      },
      routes: {},
    };
    await expect(h.app.reload(aliased)).rejects.toThrow(/tenants\.delta\.brokers: tenant "delta" and tenant "gamma" both list broker .*, address /);
    expect((await push('gamma', ['read-write'])).status).toBe(403);
  });
});

describe('App.reload and the JWT keys', () => {
  it('reads auth.publicKey again: a key file replaced and reloaded verifies the new key and no longer the old', async () => {
    const dir = await tempDir();
    const [oldKey, newKey] = [await keyPair('ES256'), await keyPair('ES256')];
    const keyFile = await dir.write('idp.pem', oldKey.spkiPem);
    const config = testConfig([broker.url], { auth: { secret: null, publicKey: keyFile } });
    const edge = await startEdge(config);
    const status = async (pair: TestKeyPair) =>
      (
        await call(edge, 'GET', '/api/v1/pop/queue/q', {
          host: 'acme.localhost',
          token: await signWith(pair, { roles: ['read-write'], tenant: 'acme', sub: 'u', exp: Math.floor(Date.now() / 1000) + 600 }),
        })
      ).status;
    try {
      expect(await status(oldKey)).not.toBe(401);
      expect(await status(newKey)).toBe(401);
      await dir.write('idp.pem', newKey.spkiPem);
      await edge.app.reload(config);
      expect(await status(newKey)).not.toBe(401);
      // Its verified-token cache went with the old verifier: the old key's token is checked again, and refused.
      expect(await status(oldKey)).toBe(401);
      // The file's new key is a change of auth.publicKey, and is reported as applied.
      expect(edge.app.reloads.last).toMatchObject({ result: 'applied', appliedSettings: ['auth.publicKey'], restartNeeded: [] });
    } finally {
      await edge.close();
      await dir.remove();
    }
  });
});
