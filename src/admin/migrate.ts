/**
 * `queen-edge migrate`: copies what an edge without a store kept in Redis into the durable store
 * (docs/store.md, "Moving from Redis"), one step per kind of record. Every step is idempotent: a
 * record the store already holds stays as it is, so the command may be run again (after a failure,
 * or by several operators) and copies only what is missing.
 */
import type { RawConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import { connectRedis, whenReady, type RedisClient } from '../redis/connection.js';
import { directoryKeys } from '../redis/keys.js';
import { openStore, type Store } from '../store/connection.js';
import { copyRecordsToStore, type CopyReport } from '../tenants/records.js';
import { copyKeysToStore } from '../keys/store-keys.js';
import { copyUsageToStore } from '../metering/copy.js';

export type { CopyReport };

/** What a copy step reads from and writes to. */
export interface CopyContext {
  readonly redis: RedisClient;
  /** redis.keyPrefix. */
  readonly keyPrefix: string;
  /** Opened and migrated to the edge's schema. */
  readonly store: Store;
  readonly log: Logger;
}

/** One kind of record: its name in the report and its idempotent copy. */
export interface CopyStep {
  readonly name: string;
  copy(ctx: CopyContext): Promise<CopyReport>;
}

/** The steps `migrate` runs, in order. */
export const COPY_STEPS: readonly CopyStep[] = [
  { name: 'tenant and plan records', copy: (c) => copyRecordsToStore(c.redis, directoryKeys(c.keyPrefix), c.store) },
  {
    name: 'API keys',
    copy: async (c) => {
      const r = await copyKeysToStore(c.redis, c.keyPrefix, c.store);
      return { copied: r.copied, same: 0, kept: r.present };
    },
  },
  {
    // Usage is copied whole once (hour rows); a second run finds the copy made and adds nothing.
    name: 'usage hours',
    copy: async (c) => {
      const r = await copyUsageToStore(c.redis, c.keyPrefix, c.store);
      if (r.alreadyCopied) c.log.info('usage was copied by an earlier migrate: nothing added');
      return { copied: r.hourRows, same: 0, kept: 0 };
    },
  },
];

/** The configuration lacks what migrating needs: the message says which setting. */
export class MigrateSetupError extends Error {}

/** Runs every step against the configuration's Redis and store; the report of each, in order. */
export async function migrateToStore(
  config: RawConfig,
  log: Logger,
  steps: readonly CopyStep[] = COPY_STEPS,
): Promise<Array<{ readonly step: string } & CopyReport>> {
  if (!config.store.url) throw new MigrateSetupError('store.url is not set: nothing to copy into (set it, or QUEEN_EDGE_STORE_URL)');
  const redis = connectRedis({ ...config.redis, timeoutMs: Math.max(config.redis.timeoutMs, 5000) });
  if (!redis) throw new MigrateSetupError('redis.url (or redis.cluster) is not set: nothing to copy from');
  let store: Store | null = null;
  try {
    await whenReady(redis, 5000);
    store = await openStore({ url: config.store.url, schema: config.store.schema, timeoutMs: config.store.timeoutMs }, log);
    const reports: Array<{ readonly step: string } & CopyReport> = [];
    for (const step of steps) reports.push({ step: step.name, ...(await step.copy({ redis, keyPrefix: config.redis.keyPrefix, store: store!, log })) });
    return reports;
  } finally {
    await store?.close();
    redis.disconnect();
  }
}
