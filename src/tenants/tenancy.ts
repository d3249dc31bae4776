/**
 * Which tenant a request is for, and whether its token may act for that tenant (docs/tenancy.md),
 * top to bottom: the host, the candidate and its verifier, the token's fit, the gates.
 *
 * 0. The host: the tenant listing the request's host name (port dropped, canonical form); on a
 *    host no tenant lists, the default tenant answers what needs no token (CORS, public routes).
 * 1. The candidate: the tenant listing the Host; else the tenant the token names (read before
 *    verification, only to choose whose keys verify it); else `auth.defaultTenant`.
 * 2. The token is verified with the candidate's own `auth` settings when it has them, else with
 *    the global ones (the caller does that).
 * 3. The verified token fits the candidate when its tenant claim names the candidate; a token
 *    without the claim fits only a tenant whose own keys accepted it, or the default tenant.
 *    So a token from the shared issuer without a claim is no key to every tenant.
 */
import { unverifiedTenantClaim, type TenantVerifiers } from '../auth/verifiers.js';
import type { TokenVerifier } from '../auth/jwt.js';
import { MAX_HOST_LENGTH, type Feature } from '../config/schema.js';
import { edgeError, isEdgeError, type EdgeError } from '../errors.js';
import { canonicalHost, hostTooLong, type Tenant, type TenantDirectory } from './model.js';

/** The settings tenancy reads (`auth.defaultTenant`, `auth.tenantClaim`). */
export interface TenancySettings {
  readonly defaultTenant: string | null;
  readonly tenantClaim: string;
}

/** The host a request names and the tenant listing it (undefined when none does). */
export interface HostTenant {
  readonly host: string;
  readonly tenant: Tenant | undefined;
}

/** The tenant whose verifier checks a token, or the refusal once the token is verified. */
export interface Candidate {
  readonly tenant: Tenant | EdgeError;
  readonly verifier: TokenVerifier;
}

export class Tenancy {
  constructor(
    private readonly directory: TenantDirectory,
    private readonly verifiers: TenantVerifiers,
    private readonly settings: TenancySettings,
  ) {}

  /** Step 0: the host named by `authority` (a Host or :authority value) and its tenant; a refusal for a name no DNS name can be. */
  byHost(authority: string): HostTenant | EdgeError {
    const host = hostName(authority);
    if (hostTooLong(host)) return edgeError('invalid_request', `host name longer than ${MAX_HOST_LENGTH} characters`);
    return { host, tenant: host === '' ? undefined : this.directory.byHost(host) };
  }

  /** The host's tenant, else the default tenant: whose policy answers what carries no token. */
  orDefault(hostTenant: Tenant | undefined): Tenant | undefined {
    return hostTenant ?? this.#defaultTenant();
  }

  /** Steps 1-2: the candidate tenant and the verifier its token is checked with. */
  candidate(hostTenant: Tenant | undefined, token: string): Candidate {
    const claim = hostTenant ? null : unverifiedTenantClaim(token, this.settings.tenantClaim);
    const tenant = candidateTenant(hostTenant, claim, this.#defaultTenant(), (id) => this.directory.byId(id));
    return { tenant, verifier: isEdgeError(tenant) ? this.verifiers.global : this.verifiers.forTenant(tenant) };
  }

  /** Step 3: null when a token verified with tenant claim `claim` may act for `tenant`. */
  fits(tenant: Tenant, claim: string | null): EdgeError | null {
    return tokenFits(tenant, claim, this.settings.defaultTenant);
  }

  #defaultTenant(): Tenant | undefined {
    const id = this.settings.defaultTenant;
    return id ? this.directory.byId(id) : undefined;
  }
}

/** Step 4, the gates: a suspended tenant, a route's feature not in the tenant's plan. */
export function tenantGate(tenant: Tenant, feature: Feature | null): EdgeError | null {
  if (tenant.status === 'suspended') return edgeError('cluster_suspended');
  if (feature !== null && !tenant.plan.features.has(feature)) {
    return edgeError('feature_gated', `feature "${feature}" is not in plan "${tenant.plan.id}"`);
  }
  return null;
}

/** The host an authority names, without its port, in the form tenants list hosts (canonicalHost). */
export function hostName(authority: string): string {
  let end: number;
  if (authority.charCodeAt(0) === 91 /* [ */) end = authority.indexOf(']') + 1;
  else {
    const colon = authority.indexOf(':');
    end = colon === -1 ? authority.length : colon;
  }
  return canonicalHost(end === authority.length ? authority : authority.slice(0, end));
}

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
