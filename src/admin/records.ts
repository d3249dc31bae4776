/**
 * The raw tenant record in force (Redis record, else the config file's), for the admin API's
 * GET: the compiled Tenant no longer holds CORS origins or which limits were overridden.
 */
import { tenantSchema, type RawConfig, type RawTenant } from '../config/schema.js';
import type { RedisClient } from '../redis/connection.js';
import { directoryKeys } from '../redis/keys.js';

/** Reads a tenant's record the way the tenant store resolves it (an invalid Redis record loses to the file). */
export function tenantRecordReader(config: RawConfig, redis: RedisClient | null): (id: string) => Promise<RawTenant | null> {
  const keys = directoryKeys(config.redis.keyPrefix);
  return async (id) => {
    const text = redis ? await redis.get(keys.tenant(id)) : null;
    if (text) {
      try {
        const parsed = tenantSchema.safeParse(JSON.parse(text));
        if (parsed.success) return parsed.data;
      } catch {
        // Not JSON: the store ignores it too.
      }
    }
    return config.tenants[id] ?? null;
  };
}
