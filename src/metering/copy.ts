/**
 * `migrate`'s usage step: copies the usage day hashes Redis holds (`<p>{t:<id>}:ud:<yyyymmdd>`)
 * into the ledger. Once only: the copy is one transaction that first claims the sequence row of a
 * pseudo-instance named after the key prefix, so running `migrate` again adds nothing (and a copy
 * that failed half-way left nothing and can simply be run again).
 */
import { Cluster, type Redis } from 'ioredis';
import type { RedisClient } from '../redis/connection.js';
import { parseUsageDayKey, usageDayPattern } from '../redis/keys.js';
import type { Store } from '../store/connection.js';
import { type UsageCounts, parseDayHash } from './counts.js';
import { addToLedger, claimSequence } from './ledger.js';

/** What a copy did. */
export interface UsageCopy {
  /** True when an earlier copy of this prefix was already in the ledger: nothing was added. */
  readonly alreadyCopied: boolean;
  readonly dayHashes: number;
  readonly hourRows: number;
}

/** Day hashes read and written together: a bounded part of the usage in memory at a time. */
const DAYS_PER_CHUNK = 1000;

/** The copy's pseudo-instance in `usage_flush`. */
export function copyInstance(keyPrefix: string): string {
  return `migrate:redis:${keyPrefix}`;
}

/** Copies every usage day hash under `keyPrefix` into the ledger, once. */
export async function copyUsageToStore(redis: RedisClient, keyPrefix: string, store: Store): Promise<UsageCopy> {
  return store.transaction(async (tx) => {
    if (!(await claimSequence(tx, copyInstance(keyPrefix), 1))) return { alreadyCopied: true, dayHashes: 0, hourRows: 0 };
    let dayHashes = 0;
    let hourRows = 0;
    const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis as Redis];
    for (const node of nodes) {
      let cursor = '0';
      let keys: string[] = [];
      // SCAN may return a key twice: each day is added once.
      const seen = new Set<string>();
      do {
        const [next, found] = await node.scan(cursor, 'MATCH', usageDayPattern(keyPrefix), 'COUNT', 1000);
        cursor = next;
        for (const k of found) {
          if (seen.has(k)) continue;
          seen.add(k);
          keys.push(k);
        }
        if (keys.length >= DAYS_PER_CHUNK || (cursor === '0' && keys.length > 0)) {
          hourRows += (await addToLedger(tx, await readDays(node, keyPrefix, keys))).hourRows;
          dayHashes += keys.length;
          keys = [];
        }
      } while (cursor !== '0');
    }
    return { alreadyCopied: false, dayHashes, hourRows };
  });
}

/** The day hashes of `keys` as a batch: tenant → hour → counts. */
async function readDays(node: Redis, keyPrefix: string, keys: readonly string[]): Promise<Map<string, Map<number, UsageCounts>>> {
  const pipe = node.pipeline();
  for (const k of keys) pipe.hgetall(k);
  const replies = (await pipe.exec()) ?? [];
  const batch = new Map<string, Map<number, UsageCounts>>();
  keys.forEach((key, i) => {
    const parsed = parseUsageDayKey(keyPrefix, key);
    const [err, hash] = replies[i] ?? [null, null];
    if (err) throw err;
    if (!parsed || !hash) return;
    const d = parsed.day;
    const dayStart = Date.UTC(Number(d.slice(0, 4)), Number(d.slice(4, 6)) - 1, Number(d.slice(6, 8)));
    let hours = batch.get(parsed.tenantId);
    if (!hours) {
      hours = new Map();
      batch.set(parsed.tenantId, hours);
    }
    for (const [hour, c] of parseDayHash(dayStart, hash as Record<string, string>)) hours.set(hour, c);
  });
  return batch;
}
