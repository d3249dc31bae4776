/** Which tenant a token may act for: the pure decision behind the pipeline's tenant steps. */
import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { compilePlan, compileTenant, type Tenant } from '../../src/tenants/model.js';
import type { TokenVerifier } from '../../src/auth/jwt.js';
import type { TenantVerifiers } from '../../src/auth/verifiers.js';
import { candidateTenant, hostName, sameTrust, Tenancy, tenantGate, tokenFits, type TrustSettings } from '../../src/tenants/tenancy.js';

const plan = compilePlan('p', {
  features: [],
  limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 0,
});
const make = (id: string, auth: Tenant['auth'] = null): Tenant =>
  compileTenant(
    id,
    { status: 'active', plan: 'p', hosts: [`${id}.example`], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null, auth },
    plan,
  );
const acme = make('acme');
const globex = make('globex');
const own = make('own', { secret: 'own-secret', publicKey: null, jwksUrl: null, issuer: null, audience: null });
const byId = (id: string) => [acme, globex, own].find((t) => t.id === id);

describe('candidateTenant', () => {
  it('the host wins over the claim; the claim over the default; nothing at all is refused', () => {
    expect(candidateTenant(acme, 'globex', globex, byId)).toBe(acme);
    expect(candidateTenant(undefined, 'globex', acme, byId)).toBe(globex);
    expect(candidateTenant(undefined, null, acme, byId)).toBe(acme);
    const unknown = candidateTenant(undefined, 'nobody', acme, byId);
    expect(isEdgeError(unknown) && unknown.code).toBe('forbidden');
    const none = candidateTenant(undefined, null, undefined, byId);
    expect(isEdgeError(none) && none.code).toBe('forbidden');
  });
});

/** An unsigned token whose payload is `claims` (only its tenant claim is read before verification). */
const tokenWith = (claims: object): string => `e30.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.x`;

describe('Tenancy', () => {
  const globalVerifier = { name: 'global' } as unknown as TokenVerifier;
  const ownVerifier = { name: 'own' } as unknown as TokenVerifier;
  const verifiers = { global: globalVerifier, forTenant: (t: Tenant) => (t.auth ? ownVerifier : globalVerifier) } as unknown as TenantVerifiers;
  const directory = {
    byId,
    byHost: (h: string) => [acme, globex, own].find((t) => t.hosts.includes(h)),
    storageUsed: () => undefined,
    all: () => [acme, globex, own],
  };
  const tenancy = (defaultTenant: string | null) => new Tenancy(directory, verifiers, { defaultTenant, tenantClaim: 'tenant' });

  it("finds the host's tenant without port or trailing dot, any case; refuses a host no DNS name can be", () => {
    expect(tenancy(null).byHost('ACME.example.:8443')).toEqual({ host: 'acme.example', tenant: acme });
    expect(tenancy(null).byHost('[::1]:8443')).toEqual({ host: '[::1]', tenant: undefined });
    expect(tenancy(null).byHost('')).toEqual({ host: '', tenant: undefined });
    const long = tenancy(null).byHost(`${'a'.repeat(300)}.example`);
    expect(isEdgeError(long) && long.code).toBe('invalid_request');
    expect(hostName('h:1')).toBe('h');
  });

  it('falls back to the default tenant in one place: without a token and as the candidate', () => {
    expect(tenancy('globex').orDefault(acme)).toBe(acme);
    expect(tenancy('globex').orDefault(undefined)).toBe(globex);
    expect(tenancy(null).orDefault(undefined)).toBeUndefined();
    expect(tenancy('globex').candidate(undefined, tokenWith({})).tenant).toBe(globex);
  });

  it("verifies with the candidate's own keys when it has them, the global ones otherwise and when there is no candidate", () => {
    const t = tenancy(null);
    expect(t.candidate(own, tokenWith({ tenant: 'acme' }))).toEqual({ tenant: own, verifier: ownVerifier });
    expect(t.candidate(undefined, tokenWith({ tenant: 'own' }))).toEqual({ tenant: own, verifier: ownVerifier });
    expect(t.candidate(acme, tokenWith({ tenant: 'own' }))).toEqual({ tenant: acme, verifier: globalVerifier });
    const none = t.candidate(undefined, tokenWith({ tenant: 'nobody' }));
    expect(isEdgeError(none.tenant) && none.tenant.code).toBe('forbidden');
    expect(none.verifier).toBe(globalVerifier);
  });

  it('fits a claimless token to the default tenant it was built with', () => {
    expect(tenancy('acme').fits(acme, null)).toBeNull();
    expect(tenancy(null).fits(acme, null)?.code).toBe('forbidden');
  });
});

describe('tenantGate', () => {
  it('refuses a suspended tenant, then a feature its plan lacks; lets the rest through', () => {
    const suspended = compileTenant(
      's',
      { status: 'suspended', plan: 'p', hosts: [], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null, auth: null },
      plan,
    );
    expect(tenantGate(suspended, null)?.code).toBe('cluster_suspended');
    expect(tenantGate(acme, 'streams')?.code).toBe('feature_gated');
    expect(tenantGate(acme, null)).toBeNull();
  });
});

describe('tokenFits', () => {
  it('a token naming the tenant fits; naming another never does, whatever keys verified it', () => {
    expect(tokenFits(acme, 'acme', null)).toBeNull();
    expect(tokenFits(acme, 'globex', null)?.code).toBe('forbidden');
    expect(tokenFits(own, 'acme', null)?.code).toBe('forbidden');
  });

  it('a token without the claim: only for a tenant whose own keys accepted it, or the default tenant', () => {
    expect(tokenFits(acme, null, null)?.code).toBe('forbidden');
    expect(tokenFits(acme, null, 'globex')?.code).toBe('forbidden');
    expect(tokenFits(acme, null, 'acme')).toBeNull();
    expect(tokenFits(own, null, null)).toBeNull();
  });
});

describe('sameTrust', () => {
  const t = (over: Partial<TrustSettings>): TrustSettings => ({ secret: null, publicKey: null, jwksUrl: null, issuer: null, audience: null, ...over });
  const jwks = 'https://idp.example/jwks.json';
  it.each([
    ['same JWKS, nothing else set', t({ jwksUrl: jwks }), t({ jwksUrl: jwks }), true],
    ['same secret, only one side sets an audience', t({ secret: 's', audience: 'a' }), t({ secret: 's' }), true],
    ['same JWKS, audiences overlap', t({ jwksUrl: jwks, audience: ['a', 'b'] }), t({ jwksUrl: jwks, audience: 'b' }), true],
    ['same JWKS, distinct audiences', t({ jwksUrl: jwks, audience: 'a' }), t({ jwksUrl: jwks, audience: 'b' }), false],
    ['same public key, distinct issuers', t({ publicKey: '/k.pem', issuer: 'x' }), t({ publicKey: '/k.pem', issuer: ['y', 'z'] }), false],
    ['different keys', t({ secret: 's' }), t({ secret: 'other' }), false],
  ])('%s', (_name, a, b, expected) => {
    expect(sameTrust(a, b)).toBe(expected);
    expect(sameTrust(b, a)).toBe(expected);
  });
});
