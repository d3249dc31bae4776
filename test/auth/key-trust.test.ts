/**
 * Key trust compared on key material: canonical JWKS URLs, RFC 7638 thumbprints for PEM keys, the
 * secret's bytes; and, through real sockets, a tenant whose settings name the global JWKS under
 * another spelling or the same PEM under another path is refused, and a JWKS that later serves a
 * key another tenant trusts has that key refused when it is fetched.
 */
import { calculateJwkThumbprint } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { canonicalJwksUrl, jwkThumbprint, sameTrust, type TrustSettings } from '../../src/auth/key-trust.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { capturingLogger, type LogLine } from '../helpers/logs.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { admin } from '../admin/admin-call.js';
import { epochSec, keyPair, signWith, tempDir, type TempDir, type TestKeyPair } from '../helpers/tokens.js';

const trust = (over: Partial<TrustSettings>): TrustSettings => ({ secret: null, publicKey: null, jwksUrl: null, issuer: null, audience: null, ...over });
const claimless = () => ({ sub: 'root', roles: ['admin', 'read-write'], iat: epochSec(Date.now()), exp: epochSec(Date.now()) + 600 });

let rsa: TestKeyPair;
let ec: TestKeyPair;
let ed: TestKeyPair;
let dir: TempDir;
beforeAll(async () => {
  [rsa, ec, ed, dir] = await Promise.all([keyPair('RS256'), keyPair('ES256'), keyPair('EdDSA'), tempDir()]);
});
afterAll(() => dir.remove());

describe('key material', () => {
  it.each([
    ['https://IdP.Example.com:443/jwks?x=1#frag', 'https://idp.example.com/jwks'],
    ['https://idp.example.com./jwks/', 'https://idp.example.com/jwks'],
    ['https://user:pw@idp.example.com/jwks', 'https://idp.example.com/jwks'],
    ['http://localhost:80/jwks', 'http://loopback/jwks'],
    ['http://127.0.0.1/jwks', 'http://loopback/jwks'],
    ['http://[::1]/jwks', 'http://loopback/jwks'],
    ['http://127.0.0.1:8080/jwks', 'http://loopback:8080/jwks'],
    ['https://idp.example.com:8443/jwks', 'https://idp.example.com:8443/jwks'],
  ])('canonical JWKS URL of %s is %s', (url, canonical) => {
    expect(canonicalJwksUrl(url)).toBe(canonical);
  });

  it('thumbprints are RFC 7638, as jose computes them', async () => {
    for (const k of [rsa, ec, ed]) expect(jwkThumbprint(k.publicJwk)).toBe(await calculateJwkThumbprint(k.publicJwk));
    expect(jwkThumbprint({ kty: 'oct', k: 'c2VjcmV0' })).toBeNull();
  });

  it('the same JWKS under another spelling, the same key as PEM or JWK, the same secret: same trust unless issuer or audience differ', async () => {
    // Key files are read in when the configuration is loaded: what is compared is the key's text.
    const [a, b] = [rsa.spkiPem, JSON.stringify(rsa.publicJwk)];
    const other = ec.spkiPem;
    expect(sameTrust(trust({ publicKey: a }), trust({ publicKey: b }))).toBe(true);
    expect(sameTrust(trust({ publicKey: a }), trust({ publicKey: other }))).toBe(false);
    expect(sameTrust(trust({ jwksUrl: 'http://127.0.0.1:9/jwks' }), trust({ jwksUrl: 'http://LOCALHOST:9/jwks?x#y' }))).toBe(true);
    expect(sameTrust(trust({ jwksUrl: 'http://127.0.0.1:9/jwks' }), trust({ jwksUrl: 'http://127.0.0.1:10/jwks' }))).toBe(false);
    expect(sameTrust(trust({ secret: 's3cret' }), trust({ secret: 's3cret', jwksUrl: 'https://x.example/j' }))).toBe(true);
    expect(sameTrust(trust({ publicKey: a, issuer: 'https://a.example' }), trust({ publicKey: b, issuer: 'https://b.example' }))).toBe(false);
    expect(sameTrust(trust({ publicKey: a, audience: ['x', 'y'] }), trust({ publicKey: b, audience: 'y' }))).toBe(true);
  });
});

/** A broker URL nothing is forwarded to: tenants may not share a broker that does not scope data by tenant. */
let port = 9;
const unusedBroker = (): string[] => [`http://127.0.0.1:${port++}`];

describe('through the edge', () => {
  let broker: BrokerDouble;
  let victimBroker: BrokerDouble;
  let lateBroker: BrokerDouble;
  let globalIdp: JwksServer;
  let lateIdp: JwksServer;
  let edge: EdgeHarness;
  let lateKey: TestKeyPair;
  let pem: string;
  let brokers: string[];
  const logs = capturingLogger('warn');

  beforeAll(async () => {
    [broker, victimBroker, lateBroker, lateKey] = await Promise.all([startBrokerDouble(), startBrokerDouble(), startBrokerDouble(), keyPair('ES256')]);
    [globalIdp, lateIdp] = await Promise.all([startJwksServer([rsa.publicJwk]), startJwksServer([lateKey.publicJwk])]);
    pem = await dir.write('victim.pem', ec.spkiPem);
    brokers = [broker.url];
    edge = await startEdge(
      testConfig(brokers, {
        auth: { jwksUrl: globalIdp.url },
        tenants: {
          victim: { plan: 'test', hosts: ['victim.localhost'], brokers: [victimBroker.url], auth: { publicKey: pem } },
          late: { plan: 'test', hosts: ['late.localhost'], brokers: [lateBroker.url], auth: { jwksUrl: lateIdp.url } },
        },
      }),
      { log: logs.log },
    );
  });

  afterAll(async () => {
    await edge.close();
    await Promise.all([broker.close(), victimBroker.close(), lateBroker.close(), globalIdp.close(), lateIdp.close()]);
  });

  const pop = (token: string, host: string) => call(edge, 'GET', '/api/v1/pop/queue/q', { token, host });

  it("a tenant naming the global JWKS under another spelling is refused at start, as a reload refuses it: the shared issuer's claimless token never acts for it", async () => {
    const spelled = `${globalIdp.url.replace('127.0.0.1', 'LOCALHOST')}?x#y`;
    const cfg = testConfig(brokers, {
      auth: { jwksUrl: globalIdp.url },
      tenants: { respelled: { plan: 'test', hosts: ['respelled.localhost'], brokers: unusedBroker(), auth: { jwksUrl: spelled } } },
    });
    await expect(startEdge(cfg, { log: logs.log })).rejects.toThrow(/tenants\.respelled\.auth: trusts the same tokens as the global auth settings/);
  });

  it("a tenant naming another tenant's PEM key under another path is refused at start, unless the issuer tells them apart", async () => {
    const copy = await dir.write('victim-copy.pem', ec.spkiPem);
    const withIntruder = (issuer: string | null) =>
      testConfig(brokers, {
        tenants: {
          victim: { plan: 'test', brokers: unusedBroker(), auth: { publicKey: pem, issuer: issuer && 'https://victim.example' } },
          intruder: { plan: 'test', brokers: unusedBroker(), auth: { publicKey: copy, issuer } },
        },
      });
    await expect(startEdge(withIntruder(null), { log: logs.log })).rejects.toThrow(/tenants.intruder.auth: trusts the same tokens as tenant "victim"/);
    const apart = await startEdge(withIntruder('https://intruder.example'), { log: logs.log });
    await apart.close();
  });

  it("a JWKS that later serves another tenant's key has that key refused when fetched, logged as an error", async () => {
    expect((await pop(await signWith(lateKey, claimless()), 'late.localhost')).status).toBe(204);
    lateIdp.setKeys([lateKey.publicJwk, ec.publicJwk]);
    const before = forwarded(lateBroker).length;
    // The unknown kid makes the edge fetch the set again; the victim's key in it is refused for "late".
    const r = await pop(await signWith(ec, claimless()), 'late.localhost');
    expect(r.status).toBe(401);
    expect(r.json).toMatchObject({ code: 'unauthorized', error: 'key not trusted for this tenant' });
    expect(forwarded(lateBroker).length).toBe(before);
    const refusal = logs.lines.find((l: LogLine) => l.msg.startsWith('a key another trust domain configured earlier also holds'));
    expect(refusal).toMatchObject({ level: 50, tenant: 'late', trustedBy: 'tenant "victim"', kid: ec.kid });
    // Its own key still works; the victim's tokens still work on the victim's host.
    expect((await pop(await signWith(lateKey, claimless()), 'late.localhost')).status).toBe(204);
    expect((await pop(await signWith(ec, claimless()), 'victim.localhost')).status).toBe(204);
  });
});

describe('admin writes', () => {
  it("a PUT naming the global JWKS under another spelling, or a file tenant's PEM key inline, is 409 conflict; a key file path is 400", async () => {
    const prefix = uniquePrefix();
    const [broker, idp] = await Promise.all([startBrokerDouble(), startJwksServer([rsa.publicJwk])]);
    const redis = await connectTest(SHARED_REDIS_URL);
    const pem = await dir.write('owner.pem', ed.spkiPem);
    const copy = await dir.write('owner-copy.pem', ed.spkiPem);
    const brokers = [broker.url];
    const edge = await startEdge(
      testConfig(brokers, {
        redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
        server: { admin: { token: 'admin-token-for-tests-0123456789' } },
        auth: { jwksUrl: idp.url },
        tenants: { owner: { plan: 'test', hosts: ['owner.localhost'], brokers: unusedBroker(), auth: { publicKey: pem } } },
      }),
    );
    try {
      const put = (auth: Record<string, unknown>) =>
        admin(edge, 'PUT', '/admin/v1/tenants/intruder', { body: { plan: 'test', hosts: ['intruder.localhost'], brokers: unusedBroker(), auth } });
      const respelled = await put({ jwksUrl: `${idp.url.replace('127.0.0.1', 'localhost')}?x` });
      expect(respelled.status).toBe(409);
      expect(respelled.json.problems).toEqual(['auth: trusts the same tokens as the global auth settings (same key, no distinct issuer or audience)']);
      const copied = await put({ publicKey: ed.spkiPem });
      expect(copied.status).toBe(409);
      expect(copied.json.problems).toEqual(['auth: trusts the same tokens as tenant "owner" (same key, no distinct issuer or audience)']);
      // An issuer on one side only tells no tokens apart: the owner's accept any issuer.
      expect((await put({ publicKey: JSON.stringify(ed.publicJwk), issuer: 'https://intruder.example' })).status).toBe(409);
      // A record never names a file: the edge would open whatever the path is.
      const path = await put({ publicKey: copy });
      expect(path.status).toBe(400);
      expect(path.json.problems).toEqual([
        'auth.publicKey: a tenant record holds its key itself (PEM text, or a JWK as JSON); a file path is read only from the configuration file',
      ]);
    } finally {
      await edge.close();
      await Promise.all([broker.close(), idp.close()]);
      await flushPrefix(redis, prefix);
      redis.disconnect();
    }
  });
});
