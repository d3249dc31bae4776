/**
 * Which tenant a request is for, and whether its token may act for that tenant (docs/tenancy.md).
 *
 * 1. The candidate: the tenant listing the Host; else the tenant the token names (read before
 *    verification, only to choose whose keys verify it); else `auth.defaultTenant`.
 * 2. The token is verified with the candidate's own `auth` settings when it has them, else with
 *    the global ones (the caller does that).
 * 3. The verified token fits the candidate when its tenant claim names the candidate; a token
 *    without the claim fits only a tenant whose own keys accepted it, or the default tenant.
 *    So a token from the shared issuer without a claim is no key to every tenant.
 */
import { edgeError, type EdgeError } from '../errors.js';
import type { Tenant } from './model.js';

/** Step 1: the tenant whose settings verify the token; an EdgeError when there is none. */
export function candidateTenant(
  hostTenant: Tenant | undefined,
  unverifiedClaim: string | null,
  defaultTenant: Tenant | undefined,
  byId: (id: string) => Tenant | undefined,
): Tenant | EdgeError {
  if (hostTenant !== undefined) return hostTenant;
  if (unverifiedClaim !== null) return byId(unverifiedClaim) ?? edgeError('forbidden', 'unknown tenant in token claim');
  return defaultTenant ?? edgeError('forbidden', 'no tenant for this request');
}

/** Step 3: null when a token verified for `tenant` (claim: its verified tenant claim) may act for it. */
export function tokenFits(tenant: Tenant, claim: string | null, defaultTenantId: string | null): EdgeError | null {
  if (claim !== null) return claim === tenant.id ? null : edgeError('forbidden', 'token tenant does not match host');
  if (tenant.auth !== null || tenant.id === defaultTenantId) return null;
  return edgeError('forbidden', 'token names no tenant');
}

/** Whether two `auth` settings trust the same tokens, compared on key material: src/auth/key-trust.ts. */
export { sameTrust, type TrustSettings } from '../auth/key-trust.js';
