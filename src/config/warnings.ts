/**
 * What a valid configuration still gets warned about at start: settings that serve, but not as an
 * operator probably meant. Logged by the start and printed by `queen-edge validate`, from this one list.
 */
import type { RawConfig } from './schema.js';
import { tenantIds } from './tenant-ids.js';

export function startWarnings(config: RawConfig): string[] {
  const out: string[] = [];
  if (!config.auth.secret && !config.auth.publicKey && !config.auth.jwksUrl) {
    out.push('no JWT key configured (auth.secret, auth.publicKey or auth.jwksUrl): every authenticated route answers 401');
  }
  if (config.auth.defaultTenant && tenantIds(config.tenants).length > 1) {
    out.push(
      `auth.defaultTenant (${config.auth.defaultTenant}) is set with several tenants: every token of the global issuer without a tenant claim acts for it (docs/tenancy.md)`,
    );
  }
  return out;
}
