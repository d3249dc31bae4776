/** Tenant-scoped verifiers: own keys only, a cache that never crosses tenants, one JWKS set per URL. */
import { createHmac } from 'node:crypto';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createTenantVerifiers, tenantAuthConfig, unverifiedTenantClaim, type AuthScope, type TenantVerifiers } from '../../src/auth/verifiers.js';
import { parseConfig } from '../../src/config/load.js';
import type { AuthConfig, RawTenantAuth } from '../../src/config/schema.js';
import { isEdgeError } from '../../src/errors.js';
import { startJwksServer } from '../helpers/jwks-server.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';
import { b64json, epochSec, keyPair, signToken, signWith, type TestKeyPair } from '../helpers/tokens.js';

const GLOBAL_SECRET = 'global-secret-0123456789abcdef-0123';
const PLAN = {
  limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 0,
};
const cfg: AuthConfig = parseConfig(
  {
    auth: { secret: GLOBAL_SECRET, issuer: 'https://global.example', rolesClaim: 'perms', jwks: { allowHttp: true, allowPrivateAddresses: true } },
    plans: { free: PLAN },
    tenants: { t: { plan: 'free', brokers: ['http://127.0.0.1:1'] } },
  },
  {},
).auth;
const own = (over: Partial<RawTenantAuth>): RawTenantAuth => ({ secret: null, publicKey: null, jwksUrl: null, issuer: null, audience: null, ...over });
const claims = () => ({ sub: 'u', iat: epochSec(Date.now()), exp: epochSec(Date.now()) + 600 });

let pair: TestKeyPair;
let verifiers: TenantVerifiers;
beforeAll(async () => {
  pair = await keyPair('ES256');
});
afterEach(() => verifiers?.close());

describe('tenantAuthConfig', () => {
  it("takes the tenant's keys, issuer and audience; keeps only algorithms and the roles claim from the global settings", () => {
    const merged = tenantAuthConfig(cfg, own({ jwksUrl: 'https://idp.example/jwks' }));
    expect(merged).toMatchObject({
      secret: null,
      publicKey: null,
      jwksUrl: 'https://idp.example/jwks',
      issuer: null,
      audience: null,
      rolesClaim: 'perms',
      algorithms: cfg.algorithms,
    });
    expect(tenantAuthConfig(cfg, own({ secret: 's', rolesClaim: 'roles', algorithms: ['HS512'] }))).toMatchObject({
      rolesClaim: 'roles',
      algorithms: ['HS512'],
    });
  });
});

describe('tenant verifiers', () => {
  it("a tenant with its own secret refuses the global key; the global verifier refuses the tenant's", async () => {
    verifiers = createTenantVerifiers(cfg, { log: capturingLogger().log });
    const tenant: AuthScope = { id: 'a', auth: own({ secret: 'tenant-a-secret-0123456789abcdef' }) };
    const globalToken = await signToken({ ...claims(), iss: 'https://global.example' }, GLOBAL_SECRET, { alg: 'HS256' });
    const tenantToken = await signToken(claims(), 'tenant-a-secret-0123456789abcdef', { alg: 'HS256' });
    expect(isEdgeError(await verifiers.forTenant(tenant).verify(globalToken))).toBe(true);
    expect(isEdgeError(await verifiers.forTenant(tenant).verify(tenantToken))).toBe(false);
    expect(isEdgeError(await verifiers.global.verify(tenantToken))).toBe(true);
    expect(verifiers.forTenant({ id: 'plain', auth: null })).toBe(verifiers.global);
  });

  it('a token verified for one tenant is no cache hit for another with the same JWKS, nor after the tenant changes its settings', async () => {
    const idp = await startJwksServer([pair.publicJwk]);
    try {
      verifiers = createTenantVerifiers(cfg, { log: capturingLogger().log });
      const a: AuthScope = { id: 'a', auth: own({ jwksUrl: idp.url, issuer: 'https://a.example' }) };
      const b: AuthScope = { id: 'b', auth: own({ jwksUrl: idp.url, issuer: 'https://b.example' }) };
      const forA = await signWith(pair, { ...claims(), iss: 'https://a.example' });
      expect(isEdgeError(await verifiers.forTenant(a).verify(forA))).toBe(false);
      expect(verifiers.forTenant(a).cached(forA)).toBeDefined();
      expect(verifiers.forTenant(b).cached(forA)).toBeUndefined();
      expect(verifiers.global.cached(forA)).toBeUndefined();
      expect(isEdgeError(await verifiers.forTenant(b).verify(forA))).toBe(true); // wrong issuer
      expect(idp.requests).toBe(1); // one set for the URL both tenants name
      const changed: AuthScope = { id: 'a', auth: own({ jwksUrl: idp.url, issuer: 'https://a2.example' }) };
      expect(verifiers.forTenant(changed).cached(forA)).toBeUndefined();
      expect(verifiers.forTenant({ id: 'a', auth: { ...changed.auth! } })).toBe(verifiers.forTenant(changed));
    } finally {
      await idp.close();
    }
  });

  it('sync drops the JWKS sets no tenant names any more: a new tenant on that URL fetches afresh', async () => {
    const idp = await startJwksServer([pair.publicJwk]);
    try {
      verifiers = createTenantVerifiers(cfg, { log: capturingLogger().log });
      const a: AuthScope = { id: 'a', auth: own({ jwksUrl: idp.url }) };
      const token = await signWith(pair, claims());
      await verifiers.forTenant(a).verify(token);
      verifiers.sync([a]);
      await verifiers.forTenant({ id: 'c', auth: own({ jwksUrl: idp.url }) }).verify(token);
      expect(idp.requests).toBe(1);
      verifiers.sync([]);
      const again = verifiers.forTenant(a);
      expect(isEdgeError(await again.verify(token))).toBe(false);
      expect(idp.requests).toBe(2);
      // A tenant new to sync has its set fetched before any token arrives.
      verifiers.sync([]);
      verifiers.sync([a]);
      await waitFor(() => idp.requests === 3, 3000, 'the pre-warming fetch');
    } finally {
      await idp.close();
    }
  });
});

describe('unverifiedTenantClaim', () => {
  it('reads a non-empty string claim, and nothing from garbage', async () => {
    expect(unverifiedTenantClaim(await signToken({ tenant: 'x' }, 's', { alg: 'HS256' }), 'tenant')).toBe('x');
    expect(unverifiedTenantClaim(await signToken({ tenant: 7 }, 's', { alg: 'HS256' }), 'tenant')).toBeNull();
    expect(unverifiedTenantClaim('not.a.token', 'tenant')).toBeNull();
  });
});

describe('token cache shares', () => {
  it("3,000 large tokens (5x its share) of one tenant's IdP stay within its byte share and evict no other tenant's cached token", async () => {
    verifiers = createTenantVerifiers(cfg, { log: capturingLogger().log });
    const a: AuthScope = { id: 'a', auth: own({ secret: 'tenant-a-secret-0123456789abcdef' }) };
    const b: AuthScope = { id: 'b', auth: own({ secret: 'tenant-b-secret-0123456789abcdef' }) };
    const bToken = await signToken(claims(), 'tenant-b-secret-0123456789abcdef', { alg: 'HS256' });
    const globalToken = await signToken({ ...claims(), iss: 'https://global.example' }, GLOBAL_SECRET, { alg: 'HS256' });
    const bIdentity = await verifiers.forTenant(b).verify(bToken);
    const globalIdentity = await verifiers.global.verify(globalToken);
    // Signed with node:crypto directly: jose's async signing would dominate the test's time.
    const head = b64json({ alg: 'HS256', typ: 'JWT' });
    const base = { ...claims(), pad: 'x'.repeat(2000) };
    let accepted = 0;
    for (let i = 0; i < 3_000; i++) {
      const input = `${head}.${b64json({ ...base, sub: `flood-${i}` })}`;
      const t = `${input}.${createHmac('sha256', 'tenant-a-secret-0123456789abcdef').update(input).digest('base64url')}`;
      if (!isEdgeError(await verifiers.forTenant(a).verify(t))) accepted++;
    }
    expect(accepted).toBe(3_000);
    expect(verifiers.forTenant(a).cacheBytes).toBeLessThanOrEqual(cfg.tenantCacheBytes);
    expect(verifiers.forTenant(a).cacheBytes).toBeGreaterThan(cfg.tenantCacheBytes / 2);
    // Hits, the same objects: neither was verified again nor evicted.
    expect(verifiers.forTenant(b).cached(bToken)).toBe(bIdentity);
    expect(verifiers.global.cached(globalToken)).toBe(globalIdentity);
  });
});
