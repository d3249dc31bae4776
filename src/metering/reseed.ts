/**
 * Re-seeding the month counters (`qm`, `qb`: src/redis/keys.ts) from the usage ledger once Redis
 * came back empty (docs/store.md, "Redis came back empty"): without it every tenant's monthly
 * quota would start again from zero.
 *
 * Each counter becomes the larger of what it holds and the ledger's month total. So a re-seed is
 * safe to repeat (a retry after a partial failure, or a peer's), and one that was not needed (a
 * counter that survived, a Redis that predates the epoch key) changes nothing. The ledger counts
 * messages as pushed (the broker's answer) where the limiter counts them at admission: the
 * re-seed takes the billed figure.
 */
import type { Logger } from '../observability/log.js';
import { duplicateWithTimeout, whenReady, type RedisClient } from '../redis/connection.js';
import type { EpochChange } from '../redis/epoch.js';
import { limiterKeys, monthKeyTtlMs } from '../redis/keys.js';
import type { Store } from '../store/connection.js';
import { bucketStart } from './counts.js';
import { ledgerTotals, type MonthTotal } from './ledger.js';

/** KEYS: qm, qb. ARGV: messages, bytes, PX. Raises each counter to its ledger total; returns how many it raised. */
const RESEED_LUA = `
local raised = 0
for i = 1, 2 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') < tonumber(ARGV[i]) then
    redis.call('SET', KEYS[i], ARGV[i], 'PX', ARGV[3])
    raised = raised + 1
  end
end
return raised
`;

/** Calls in flight at once: 100,000 tenants are re-seeded in a few seconds without a burst of 100,000 commands. */
const CONCURRENCY = 500;

/** `yyyymm` of the UTC month holding `ms`. */
function monthIdOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 7).replace('-', '');
}

/** Raises each tenant's month counters to its month totals; returns how many tenants it raised. */
export async function writeMonthCounters(redis: RedisClient, prefix: string, totals: ReadonlyMap<string, MonthTotal>, now: number): Promise<number> {
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
        return redis.eval(RESEED_LUA, 2, k.monthMessages, k.monthBytes, t.messages, t.ingressBytes, ttl) as Promise<number>;
      }),
    );
    written += replies.filter((n) => n > 0).length;
  }
  return written;
}

/** Re-seeds this month's counters of every tenant with usage in the ledger; returns the tenants written. */
export async function reseedMonthCounters(redis: RedisClient, prefix: string, store: Store, now: number): Promise<number> {
  const start = bucketStart(now, 'month');
  const d = new Date(start);
  const totals = await ledgerTotals(store, start, Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
  return writeMonthCounters(redis, prefix, totals, now);
}

/** Command timeout of the re-seed's connection. */
const RESEED_TIMEOUT_MS = 2000;
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

/** How long an edge that did not write the new epoch waits before its own re-seed: a few flush periods. */
const PEER_DELAY_MS = 3000;

/** Runs a re-seed for each new epoch this instance sees, retried until it succeeds or a newer epoch replaces it. */
export class MonthCounterReseeder {
  readonly #deps: ReseedDeps;
  /** Tenants whose counters were re-seeded, since the start. */
  reseededTenants = 0;
  #epoch: string | null = null;
  #closed = false;

  constructor(deps: ReseedDeps) {
    this.#deps = deps;
  }

  /**
   * The epoch listener: every edge that sees a new epoch re-seeds, the one that wrote it at once,
   * the others a little later, after flushing their own counts. Raising is idempotent, so the
   * re-seed does not hang on one edge surviving it, and each later one reads a ledger holding more
   * of the edges' counts.
   */
  readonly follow = (change: EpochChange): void => {
    this.#epoch = change.current;
    void this.#run(change.current, change.previous === null, change.won ? 0 : PEER_DELAY_MS);
  };

  async #run(epoch: string, atStart: boolean, delayMs: number): Promise<void> {
    const { flush, log, clock } = this.#deps;
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs).unref());
    while (!this.#closed && this.#epoch === epoch) {
      const started = clock();
      try {
        // Bounded: a limiter that sees no request has nothing to admit in a fail mode either.
        const until = clock() + LIMITER_WAIT_MS;
        while (!this.#deps.limiterOnRedis() && clock() < until && !this.#closed) await new Promise((r) => setTimeout(r, 50).unref());
        await flush();
        const tenants = await this.#reseed(clock());
        this.reseededTenants += tenants;
        if (tenants > 0 || !atStart) log.warn({ tenants, atStart, ms: clock() - started }, 'month counters re-seeded from the usage ledger');
        return;
      } catch (err) {
        log.error({ err, atStart }, 'month counters not re-seeded yet (store or Redis refused); retrying');
        await new Promise((r) => setTimeout(r, this.#deps.retryMs ?? 5000).unref());
      }
    }
  }

  /**
   * On a connection of its own with a longer timeout: thousands of calls must not fail on the
   * limiter's fail-fast timeout (each failure means another whole try) nor queue behind its admits.
   */
  async #reseed(now: number): Promise<number> {
    const { redis, prefix, store } = this.#deps;
    const conn = duplicateWithTimeout(redis, RESEED_TIMEOUT_MS);
    try {
      await whenReady(conn, RESEED_TIMEOUT_MS);
      return await reseedMonthCounters(conn, prefix, store, now);
    } finally {
      conn.disconnect();
    }
  }

  close(): void {
    this.#closed = true;
  }
}
