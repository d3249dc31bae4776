/**
 * Who keeps a key two trust domains hold, through real sockets: the domain configured first, never
 * the one whose set was fetched first. A tenant that copies the shared issuer's new key into its
 * own JWKS and gets it fetched first (one unknown-kid token) takes nothing from the tenants on the
 * shared issuer; a record copying a file tenant's key likewise, and a record copying an older
 * record's key, also on an instance started after both were written.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { capturingLogger } from '../helpers/logs.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';
import { craftToken, epochSec, keyPair, signWith, type TestKeyPair } from '../helpers/tokens.js';
import { waitFor, waitForValue } from '../helpers/wait.js';

const now = () => epochSec(Date.now());
const claims = (tenant?: string) => ({ sub: 'u', roles: ['read-write'], iat: now(), exp: now() + 600, ...(tenant ? { tenant } : {}) });
/** A token whose only purpose is its kid: the edge fetches the tenant's set to look for it. */
const probe = (kid: string) => craftToken({ alg: 'ES256', kid }, claims(), 'c2ln');

describe('the shared issuer rotates; a tenant serving the new key first does not take it', () => {
  let acmeBroker: BrokerDouble;
  let sneakyBroker: BrokerDouble;
  let sharedIdp: JwksServer;
  let sneakyIdp: JwksServer;
  let edge: EdgeHarness;
  let current: TestKeyPair;
  let next: TestKeyPair;
  let sneakyOwn: TestKeyPair;
  const logs = capturingLogger('warn');

  beforeAll(async () => {
    [acmeBroker, sneakyBroker, current, next, sneakyOwn] = await Promise.all([
      startBrokerDouble(),
      startBrokerDouble(),
      keyPair('ES256'),
      keyPair('ES256'),
      keyPair('ES256'),
    ]);
    [sharedIdp, sneakyIdp] = await Promise.all([startJwksServer([current.publicJwk]), startJwksServer([sneakyOwn.publicJwk])]);
    edge = await startEdge(
      testConfig([acmeBroker.url], {
        auth: { secret: null, jwksUrl: sharedIdp.url },
        tenants: { sneaky: { plan: 'test', hosts: ['sneaky.localhost'], brokers: [sneakyBroker.url], auth: { jwksUrl: sneakyIdp.url } } },
      }),
      { log: logs.log },
    );
  });
  afterAll(async () => {
    await edge.close();
    await Promise.all([acmeBroker.close(), sneakyBroker.close(), sharedIdp.close(), sneakyIdp.close()]);
  });

  const pop = (token: string, host: string) => call(edge, 'GET', '/api/v1/pop/queue/q', { token, host });

  it("the shared issuer's tenants keep its new key; the copying tenant is refused it", async () => {
    expect((await pop(await signWith(current, claims('acme')), 'acme.localhost')).status).toBe(204);
    // The shared IdP publishes its next key; the sneaky tenant copies it and gets its own set fetched first.
    sharedIdp.setKeys([current.publicJwk, next.publicJwk]);
    sneakyIdp.setKeys([sneakyOwn.publicJwk, next.publicJwk]);
    expect((await pop(probe(next.kid), 'sneaky.localhost')).status).toBe(401);
    const fetchedBySneaky = sneakyIdp.requests;
    expect(fetchedBySneaky).toBeGreaterThanOrEqual(2);

    // Ownership by fetch order refused this: "key not trusted for this tenant" for every tenant of the shared issuer.
    const acme = await pop(await signWith(next, claims('acme')), 'acme.localhost');
    expect(acme.status).toBe(204);
    const refused = await pop(await signWith(next, claims()), 'sneaky.localhost');
    expect(refused.status).toBe(401);
    expect(refused.json).toMatchObject({ code: 'unauthorized', error: 'key not trusted for this tenant' });
    expect(logs.lines.find((l) => l.msg.startsWith('a key another trust domain configured earlier'))).toMatchObject({
      level: 50,
      tenant: 'sneaky',
      trustedBy: 'global auth settings',
      kid: next.kid,
    });
    // The sneaky tenant's own key still works.
    expect((await pop(await signWith(sneakyOwn, claims()), 'sneaky.localhost')).status).toBe(204);
  });
});

describe("a record serving a file tenant's key, fetched first", () => {
  it('the file tenant keeps it; the record is refused it', async () => {
    const prefix = uniquePrefix();
    const [broker, victimBroker, victimKey, intruderKey] = await Promise.all([startBrokerDouble(), startBrokerDouble(), keyPair('ES256'), keyPair('ES256')]);
    const [victimIdp, intruderIdp] = await Promise.all([startJwksServer([]), startJwksServer([intruderKey.publicJwk])]);
    const redis = await connectTest(SHARED_REDIS_URL);
    const edge = await startEdge(
      testConfig([broker.url], {
        redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
        server: { admin: { token: ADMIN_TOKEN } },
        tenants: { victim: { plan: 'test', hosts: ['victim.localhost'], brokers: [victimBroker.url], auth: { jwksUrl: victimIdp.url } } },
      }),
    );
    try {
      const put = await admin(edge, 'PUT', '/admin/v1/tenants/intruder', {
        body: { plan: 'test', hosts: ['intruder.localhost'], brokers: ['http://127.0.0.1:9'], auth: { jwksUrl: intruderIdp.url } },
      });
      expect(put.status).toBe(200);
      // The victim's IdP starts serving a new key; the intruder copies it and has it fetched first.
      victimIdp.setKeys([victimKey.publicJwk]);
      intruderIdp.setKeys([intruderKey.publicJwk, victimKey.publicJwk]);
      expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: probe(victimKey.kid), host: 'intruder.localhost' })).status).toBe(401);
      const victim = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(victimKey, claims()), host: 'victim.localhost' });
      expect(victim.status).toBe(204);
      const intruder = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(victimKey, claims()), host: 'intruder.localhost' });
      expect(intruder.json).toMatchObject({ code: 'unauthorized', error: 'key not trusted for this tenant' });
    } finally {
      await edge.close();
      await Promise.all([broker.close(), victimBroker.close(), victimIdp.close(), intruderIdp.close()]);
      await flushPrefix(redis, prefix);
      redis.disconnect();
    }
  });
});

describe('two records holding one key', () => {
  it('the older record keeps it, on a restarted instance too, whichever id sorts first', async () => {
    const prefix = uniquePrefix();
    const [broker, olderBroker, newerBroker, shared, newerOwn] = await Promise.all([
      startBrokerDouble(),
      startBrokerDouble(),
      startBrokerDouble(),
      keyPair('ES256'),
      keyPair('ES256'),
    ]);
    const [olderIdp, newerIdp] = await Promise.all([startJwksServer([shared.publicJwk]), startJwksServer([newerOwn.publicJwk])]);
    const redis = await connectTest(SHARED_REDIS_URL);
    const config = testConfig([broker.url], {
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
      server: { admin: { token: ADMIN_TOKEN } },
    });
    let edge = await startEdge(config);
    try {
      const put = (id: string, brokerUrl: string, jwksUrl: string) =>
        admin(edge, 'PUT', `/admin/v1/tenants/${id}`, { body: { plan: 'test', hosts: [`${id}.localhost`], brokers: [brokerUrl], auth: { jwksUrl } } });
      // "zeta" first, "alpha" later: alpha sorts first by id but is the newer record.
      expect((await put('zeta', olderBroker.url, olderIdp.url)).status).toBe(200);
      const zetaSince = await waitForValue(async () => (await redis.hget(`${prefix}{dir}:auth-since`, 'zeta')) ?? undefined, 5000, 'the age of zeta kept');
      // Two writes in one millisecond would tie (then the lower id wins).
      await waitFor(() => Date.now() > Number(zetaSince), 1000, 'the clock past the first write');
      expect((await put('alpha', newerBroker.url, newerIdp.url)).status).toBe(200);
      newerIdp.setKeys([newerOwn.publicJwk, shared.publicJwk]);
      // A restarted instance: nothing of the first one's order survives but what Redis keeps.
      await edge.close();
      edge = await startEdge(config);
      expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: probe(shared.kid), host: 'alpha.localhost' })).status).toBe(401);
      const older = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(shared, claims()), host: 'zeta.localhost' });
      expect(older.status).toBe(204);
      const newer = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(shared, claims()), host: 'alpha.localhost' });
      expect(newer.json).toMatchObject({ code: 'unauthorized', error: 'key not trusted for this tenant' });
    } finally {
      await edge.close();
      await Promise.all([broker.close(), olderBroker.close(), newerBroker.close(), olderIdp.close(), newerIdp.close()]);
      await flushPrefix(redis, prefix);
      redis.disconnect();
    }
  });
});
