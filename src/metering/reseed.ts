/**
 * Re-seeding the month counters (`qm`, `qb`: src/redis/keys.ts) from the usage ledger once Redis
 * came back empty (docs/store.md, "Redis came back empty"): without it every tenant's monthly
 * quota would start again from zero.
 *
 * The counters the limiter has written since Redis came back are kept and the ledger's month
 * totals added to them (`add`); at an edge's start, when Redis held no epoch, only counters that
 * do not exist are written (`absent`), so a Redis that kept its counters but predates the epoch
 * key is not counted twice. The ledger counts messages as pushed (the broker's answer) where the
 * limiter counts them at admission: the re-seed takes the billed figure.
 */
import type { Logger } from '../observability/log.js';
import type { RedisClient } from '../redis/connection.js';
import type { EpochChange } from '../redis/epoch.js';
import { limiterKeys, monthKeyTtlMs, monthReseedKey } from '../redis/keys.js';
import type { Store } from '../store/connection.js';
import { bucketStart } from './counts.js';
import { ledgerTotals, type MonthTotal } from './ledger.js';

export type ReseedMode = 'add' | 'absent';

/**
 * KEYS: qm, qb, the re-seed mark. ARGV: messages, bytes, PX, mode, epoch. Returns how many
 * counters it wrote. The mark holds the epoch last re-seeded, so a retry after a partial failure
 * adds nothing twice.
 */
const RESEED_LUA = `
if redis.call('GET', KEYS[3]) == ARGV[5] then return 0 end
redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[3])
local wrote = 0
for i = 1, 2 do
  if ARGV[4] == 'add' or redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('INCRBY', KEYS[i], ARGV[i])
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
    wrote = wrote + 1
  end
end
return wrote
`;

/** Calls in flight at once: 100,000 tenants are re-seeded in a few seconds without a burst of 100,000 commands. */
const CONCURRENCY = 500;

/** `yyyymm` of the UTC month holding `ms`. */
function monthIdOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 7).replace('-', '');
}

/** Writes each tenant's month totals into its month counters; returns how many tenants it wrote to. */
export async function writeMonthCounters(
  redis: RedisClient,
  prefix: string,
  totals: ReadonlyMap<string, MonthTotal>,
  now: number,
  mode: ReseedMode,
  epoch: string,
): Promise<number> {
  const start = bucketStart(now, 'month');
  const d = new Date(start);
  const ttl = monthKeyTtlMs(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1), now);
  const month = monthIdOf(start);
  const entries = [...totals].filter(([, t]) => t.messages > 0 || t.ingressBytes > 0);
  let written = 0;
  for (let i = 0; i < entries.length; i += CONCURRENCY) {
    const replies = await Promise.all(
      entries.slice(i, i + CONCURRENCY).map(([tenantId, t]) => {
        const k = limiterKeys(prefix, tenantId, month);
        const mark = monthReseedKey(prefix, tenantId, month);
        return redis.eval(RESEED_LUA, 3, k.monthMessages, k.monthBytes, mark, t.messages, t.ingressBytes, ttl, mode, epoch) as Promise<number>;
      }),
    );
    written += replies.filter((n) => n > 0).length;
  }
  return written;
}

/** Re-seeds this month's counters of every tenant with usage in the ledger; returns the tenants written. */
export async function reseedMonthCounters(redis: RedisClient, prefix: string, store: Store, now: number, mode: ReseedMode, epoch: string): Promise<number> {
  const start = bucketStart(now, 'month');
  const d = new Date(start);
  const totals = await ledgerTotals(store, start, Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
  return writeMonthCounters(redis, prefix, totals, now, mode, epoch);
}

/** How long a re-seed waits for the limiter to be back on Redis. */
const LIMITER_WAIT_MS = 10_000;

/** What the re-seed needs from its surroundings. */
export interface ReseedDeps {
  readonly redis: RedisClient;
  readonly prefix: string;
  readonly store: Store;
  /** Puts this instance's counts in the ledger first (those counted before the loss are in no counter now). */
  readonly flush: () => Promise<unknown>;
  readonly log: Logger;
  readonly clock: () => number;
  /**
   * Whether the limiter admits on Redis again. The re-seed waits for it: what a fail mode admits
   * meanwhile is in no counter, only in the ledger, so the ledger is read once that has stopped.
   */
  readonly limiterOnRedis: () => boolean;
  /** Pause between tries while the store or Redis refuses; default 5000 ms. */
  readonly retryMs?: number;
}

/** Runs a re-seed for each new epoch this instance wrote, retried until it succeeds or a newer epoch replaces it. */
export class MonthCounterReseeder {
  readonly #deps: ReseedDeps;
  /** Tenants whose counters were re-seeded, since the start. */
  reseededTenants = 0;
  #epoch: string | null = null;
  #closed = false;
  readonly #done = new Set<(tenants: number) => void>();

  constructor(deps: ReseedDeps) {
    this.#deps = deps;
  }

  /** Called after each completed re-seed with the number of tenants written. */
  onReseeded(listener: (tenants: number) => void): () => void {
    this.#done.add(listener);
    return () => this.#done.delete(listener);
  }

  /** The epoch listener: re-seeds when this instance wrote the new epoch. */
  readonly follow = (change: EpochChange): void => {
    if (!change.won) return;
    this.#epoch = change.current;
    void this.#run(change.current, change.previous === null ? 'absent' : 'add');
  };

  async #run(epoch: string, mode: ReseedMode): Promise<void> {
    const { redis, prefix, store, flush, log, clock } = this.#deps;
    while (!this.#closed && this.#epoch === epoch) {
      const started = clock();
      try {
        // Bounded: a limiter that sees no request has nothing to admit in a fail mode either.
        const until = clock() + LIMITER_WAIT_MS;
        while (!this.#deps.limiterOnRedis() && clock() < until && !this.#closed) await new Promise((r) => setTimeout(r, 50).unref());
        await flush();
        const tenants = await reseedMonthCounters(redis, prefix, store, clock(), mode, epoch);
        this.reseededTenants += tenants;
        if (tenants > 0 || mode === 'add') log.warn({ tenants, mode, ms: clock() - started }, 'month counters re-seeded from the usage ledger');
        for (const listener of this.#done) listener(tenants);
        return;
      } catch (err) {
        log.error({ err, mode }, 'month counters not re-seeded yet (store or Redis refused); retrying');
        await new Promise((r) => setTimeout(r, this.#deps.retryMs ?? 5000).unref());
      }
    }
  }

  close(): void {
    this.#closed = true;
  }
}
