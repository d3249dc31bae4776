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
  if ((config.redis.url || config.redis.cluster.length > 0) && !config.store.url) {
    out.push(
      'Redis is configured without store.url: admin writes (tenants, plans, suspensions, storage), API keys and metered usage live only in Redis, so a Redis that restarts empty, fails over to a replica that was behind, or evicts keys loses them; set store.url to a PostgreSQL database and run `queen-edge migrate` (docs/store.md)',
    );
  }
  return out;
}
