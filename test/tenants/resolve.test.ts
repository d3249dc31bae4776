/** Which tenant a token may act for: the pure decision behind the pipeline's tenant steps. */
import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { compilePlan, compileTenant, type Tenant } from '../../src/tenants/model.js';
import { candidateTenant, sameTrust, tokenFits, type TrustSettings } from '../../src/tenants/resolve.js';

const plan = compilePlan('p', { features: [], limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 }, quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 }, storageBytes: 0 });
const make = (id: string, auth: Tenant['auth'] = null): Tenant => compileTenant(id, { status: 'active', plan: 'p', hosts: [`${id}.example`], brokers: ['http://127.0.0.1:1'], cors: { origins: [] }, boundedLoadFactor: null, auth }, plan);
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
