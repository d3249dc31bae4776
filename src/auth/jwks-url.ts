/** Where a JWKS may be fetched from (docs/security.md, "JWKS endpoints"), decided from the URL alone. */
import { isIP } from 'node:net';
import { isPublicAddress } from '../net/public-address.js';

/** What a JWKS set may fetch. */
export interface JwksFetchPolicy {
  readonly maxBytes: number;
  /** null: the operator's own endpoint (any http(s) address); else a tenant's, with these allowances. */
  readonly tenant: TenantJwksAllowances | null;
}

/** `auth.jwks.allowHttp` and `allowPrivateAddresses`. */
export interface TenantJwksAllowances {
  readonly allowHttp: boolean;
  readonly allowPrivateAddresses: boolean;
}

/** Why `url` may not be fetched under `policy` before any connection is tried; null when it may. */
export function jwksUrlRefusal(url: string, policy: Pick<JwksFetchPolicy, 'tenant'>): string | null {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'not a URL';
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') return 'not http(s)';
  if (policy.tenant === null) return null;
  if (parsed.protocol !== 'https:' && !policy.tenant.allowHttp) return 'a tenant JWKS must be https (auth.jwks.allowHttp)';
  const host = parsed.hostname.replace(/^\[|\]$/g, '');
  if (!policy.tenant.allowPrivateAddresses && isIP(host) !== 0 && !isPublicAddress(host)) {
    return 'a tenant JWKS may not name a non-public address (auth.jwks.allowPrivateAddresses)';
  }
  return null;
}
