/**
 * Where flushed usage lives: Redis, shared by every instance, or memory when no Redis is
 * configured (one instance). Redis layout in src/redis/keys.ts: each tenant's usage sits in its
 * own hash slot, so on a Redis Cluster a flush that spans tenants spans slots. A flush is applied
 * as one Lua call per slot (all tenants of a batch that share a slot go together), concurrently.
 *
 * Exactly once: each tenant keeps, per instance, the last batch sequence number applied to it,
 * and the script skips a tenant whose number is not above it. A batch is retried whole, with the
 * same number, until every slot acknowledged it; the slots that had applied it skip the retry,
 * so a reply lost to a timeout or a failover neither loses nor doubles a count.
 */
import calculateSlot from 'cluster-key-slot';
import { duplicateWithTimeout, type RedisClient } from '../redis/connection.js';
import { usageDayKey, usageSeqKey } from '../redis/keys.js';
import type { Store } from '../store/connection.js';
import { HOUR_MS, UsageCounts, dayId, hourFields, parseDayHash } from './counts.js';
import { LedgerUsageStore } from './ledger.js';

/** Counts of one flush: tenant → hour start (ms) → counts. */
export type UsageBatch = ReadonlyMap<string, ReadonlyMap<number, UsageCounts>>;

/** The usage backend behind the meter. */
export interface UsageStore {
  readonly backing: 'store' | 'redis' | 'memory';
  /** Applies a batch unless this instance already applied `seq` or a later one. */
  apply(instanceId: string, seq: number, batch: UsageBatch): Promise<void>;
  /** A tenant's hourly counts for hours starting in [fromMs, toMs). */
  read(tenantId: string, fromMs: number, toMs: number): Promise<Map<number, UsageCounts>>;
  close(): Promise<void>;
}

/** Hourly usage is kept this long (billing periods plus disputes). */
export const RETENTION_DAYS = 400;
const DAY_MS = 24 * HOUR_MS;
/** A sequence key outlives any retry loop of a live instance by far. */
const SEQ_TTL_SEC = 7 * 24 * 3600;
/** A flush carries at most a second of counts; reads may pipeline a year of days. */
const COMMAND_TIMEOUT_MS = 2000;

/**
 * KEYS: per tenant, its seq key then its day keys. ARGV: seq, ttl, seq ttl, then per tenant: the
 * number of its day keys, then per day key: n, n × (field, incr). Returns how many tenants it applied.
 */
const APPLY_LUA = `
local seq = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
local a = 4
local k = 1
local applied = 0
while k <= #KEYS do
  local seqKey = KEYS[k]
  local days = tonumber(ARGV[a])
  a = a + 1
  local fresh = seq > tonumber(redis.call('GET', seqKey) or '0')
  for d = 1, days do
    local n = tonumber(ARGV[a])
    a = a + 1
    if fresh then
      for i = 1, n do
        redis.call('HINCRBY', KEYS[k + d], ARGV[a + 2 * i - 2], ARGV[a + 2 * i - 1])
      end
      redis.call('EXPIRE', KEYS[k + d], ttl)
    end
    a = a + 2 * n
  end
  if fresh then
    redis.call('SET', seqKey, seq, 'EX', tonumber(ARGV[3]))
    applied = applied + 1
  end
  k = k + 1 + days
end
return applied
`;

type ApplyCommand = (numKeys: number, ...args: Array<string | number>) => Promise<number>;

class RedisUsageStore implements UsageStore {
  readonly backing = 'redis';
  readonly #redis: RedisClient;
  readonly #prefix: string;

  constructor(shared: RedisClient, prefix: string) {
    // Its own connection: a flush never queues behind (or ahead of) the limiter's EVALSHA, and it
    // may take longer than the limiter's fail-fast command timeout.
    const redis = duplicateWithTimeout(shared, COMMAND_TIMEOUT_MS);
    redis.defineCommand('qeUsageApply', { lua: APPLY_LUA });
    this.#redis = redis;
    this.#prefix = prefix;
  }

  async apply(instanceId: string, seq: number, batch: UsageBatch): Promise<void> {
    // Slot → the script call's keys and arguments; on a single Redis the slots only group calls.
    const calls = new Map<number, { keys: string[]; args: Array<string | number> }>();
    for (const [tenantId, hours] of batch) {
      const seqKey = usageSeqKey(this.#prefix, tenantId, instanceId);
      const slot = calculateSlot(seqKey);
      let call = calls.get(slot);
      if (!call) {
        call = { keys: [], args: [seq, RETENTION_DAYS * 24 * 3600, SEQ_TTL_SEC] };
        calls.set(slot, call);
      }
      const days = new Map<string, Array<[string, number]>>();
      for (const [hour, counts] of hours) {
        const key = usageDayKey(this.#prefix, tenantId, dayId(hour));
        let fields = days.get(key);
        if (!fields) {
          fields = [];
          days.set(key, fields);
        }
        fields.push(...hourFields(new Date(hour).getUTCHours(), counts));
      }
      call.keys.push(seqKey, ...days.keys());
      call.args.push(days.size);
      for (const fields of days.values()) {
        call.args.push(fields.length);
        for (const [f, n] of fields) call.args.push(f, n);
      }
    }
    const apply = (this.#redis as unknown as { qeUsageApply: ApplyCommand }).qeUsageApply.bind(this.#redis);
    // Every slot is tried even when one fails, so a retry finds as much as possible already applied.
    const results = await Promise.allSettled([...calls.values()].map((c) => apply(c.keys.length, ...c.keys, ...c.args)));
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
  }

  async read(tenantId: string, fromMs: number, toMs: number): Promise<Map<number, UsageCounts>> {
    const starts: number[] = [];
    for (let day = fromMs - (fromMs % DAY_MS); day < toMs; day += DAY_MS) starts.push(day);
    const pipe = this.#redis.pipeline();
    for (const day of starts) pipe.hgetall(usageDayKey(this.#prefix, tenantId, dayId(day)));
    const replies = (await pipe.exec()) ?? [];
    const out = new Map<number, UsageCounts>();
    replies.forEach(([err, hash], i) => {
      if (err) throw err;
      for (const [hour, c] of parseDayHash(starts[i]!, hash as Record<string, string>)) if (hour >= fromMs && hour < toMs) out.set(hour, c);
    });
    return out;
  }

  async close(): Promise<void> {
    await this.#redis.quit().catch(() => this.#redis.disconnect());
  }
}

class MemoryUsageStore implements UsageStore {
  readonly backing = 'memory';
  readonly #tenants = new Map<string, Map<number, UsageCounts>>();
  readonly #applied = new Map<string, number>();

  async apply(instanceId: string, seq: number, batch: UsageBatch): Promise<void> {
    if ((this.#applied.get(instanceId) ?? 0) >= seq) return;
    this.#applied.set(instanceId, seq);
    for (const [tenantId, hours] of batch) {
      let kept = this.#tenants.get(tenantId);
      if (!kept) {
        kept = new Map();
        this.#tenants.set(tenantId, kept);
      }
      for (const [hour, c] of hours) {
        let k = kept.get(hour);
        if (!k) {
          k = new UsageCounts();
          kept.set(hour, k);
        }
        k.add(c);
      }
    }
  }

  async read(tenantId: string, fromMs: number, toMs: number): Promise<Map<number, UsageCounts>> {
    const out = new Map<number, UsageCounts>();
    for (const [hour, c] of this.#tenants.get(tenantId) ?? []) {
      if (hour < fromMs || hour >= toMs) continue;
      const copy = new UsageCounts();
      copy.add(c);
      out.set(hour, copy);
    }
    return out;
  }

  async close(): Promise<void> {}
}

/**
 * The ledger when a durable store is given; else Redis-backed when a client is given (the usage
 * store opens its own connection from it); else memory.
 */
export function createUsageStore(redis: RedisClient | null, keyPrefix: string, store: Store | null = null): UsageStore {
  if (store) return new LedgerUsageStore(store);
  return redis ? new RedisUsageStore(redis, keyPrefix) : new MemoryUsageStore();
}
