/**
 * The usage ledger in the durable store (docs/store.md, "Usage"): one row per tenant and UTC hour
 * (`usage_hour`), refusals by code beside it (`usage_refusal`), and per instance the last flush
 * sequence number applied (`usage_flush`).
 *
 * Exactly once: a flush is one transaction that first moves its instance's sequence row forward and
 * only then adds its counts. A retried batch (its reply lost after the commit) finds its number
 * already there and adds nothing; a batch whose transaction failed left nothing, and its retry adds
 * it whole. The row lock on `usage_flush` also orders two tries of one batch that overlap.
 */
import type { ErrorCode } from '../errors.js';
import type { Store, Transaction } from '../store/connection.js';
import { UsageCounts } from './counts.js';
import type { UsageBatch, UsageStore } from './store.js';

/** Rows per statement: a flush of 100,000 tenants is ten statements, each well inside the statement timeout. */
const ROWS_PER_STATEMENT = 10_000;

/** Sequence rows of instances gone this long are deleted (a live instance flushes every second). */
const FLUSH_ROW_DAYS = 7;

const ADD_HOURS = `INSERT INTO usage_hour AS u (tenant, hour, requests, messages_pushed, messages_delivered, acks, ingress_bytes, egress_bytes)
  SELECT t, to_timestamp(h / 1000), r, mp, md, a, bi, be
  FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[]) AS x(t, h, r, mp, md, a, bi, be)
  ON CONFLICT (tenant, hour) DO UPDATE SET
    requests = u.requests + EXCLUDED.requests,
    messages_pushed = u.messages_pushed + EXCLUDED.messages_pushed,
    messages_delivered = u.messages_delivered + EXCLUDED.messages_delivered,
    acks = u.acks + EXCLUDED.acks,
    ingress_bytes = u.ingress_bytes + EXCLUDED.ingress_bytes,
    egress_bytes = u.egress_bytes + EXCLUDED.egress_bytes`;

const ADD_REFUSALS = `INSERT INTO usage_refusal AS u (tenant, hour, code, n)
  SELECT t, to_timestamp(h / 1000), c, n FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bigint[]) AS x(t, h, c, n)
  ON CONFLICT (tenant, hour, code) DO UPDATE SET n = u.n + EXCLUDED.n`;

/** What one `addToLedger` wrote: rows of `usage_hour` and of `usage_refusal`. */
export interface LedgerWrite {
  readonly hourRows: number;
  readonly refusalRows: number;
}

/** Adds a batch's counts to the ledger inside `tx` (no idempotency of its own: callers guard it). */
export async function addToLedger(tx: Transaction, batch: UsageBatch): Promise<LedgerWrite> {
  const hours = new HourColumns();
  const refusals: [string[], number[], string[], number[]] = [[], [], [], []];
  let hourRows = 0;
  let refusalRows = 0;
  for (const [tenantId, byHour] of batch) {
    for (const [hour, c] of byHour) {
      hours.push(tenantId, hour, c);
      if (hours.size >= ROWS_PER_STATEMENT) hourRows += await hours.write(tx);
      for (const [code, n] of Object.entries(c.refusals)) {
        if (!n) continue;
        refusals[0].push(tenantId);
        refusals[1].push(hour);
        refusals[2].push(code);
        refusals[3].push(n);
      }
    }
  }
  hourRows += await hours.write(tx);
  for (let i = 0; i < refusals[0].length; i += ROWS_PER_STATEMENT) {
    await tx.query(
      ADD_REFUSALS,
      refusals.map((col) => col.slice(i, i + ROWS_PER_STATEMENT)),
    );
    refusalRows += Math.min(ROWS_PER_STATEMENT, refusals[0].length - i);
  }
  return { hourRows, refusalRows };
}

/** The `usage_hour` columns of the rows not yet written, as arrays for one unnest statement. */
class HourColumns {
  #cols: [string[], number[], number[], number[], number[], number[], number[], number[]] = [[], [], [], [], [], [], [], []];

  get size(): number {
    return this.#cols[0].length;
  }

  push(tenantId: string, hour: number, c: UsageCounts): void {
    const k = this.#cols;
    k[0].push(tenantId);
    k[1].push(hour);
    k[2].push(c.requests);
    k[3].push(c.messagesPushed);
    k[4].push(c.messagesDelivered);
    k[5].push(c.acks);
    k[6].push(c.ingressBytes);
    k[7].push(c.egressBytes);
  }

  async write(tx: Transaction): Promise<number> {
    const n = this.size;
    if (n === 0) return 0;
    await tx.query(ADD_HOURS, this.#cols);
    this.#cols = [[], [], [], [], [], [], [], []];
    return n;
  }
}

/**
 * Moves `instance`'s applied sequence number to `seq` inside `tx`; false when it already was at
 * `seq` or beyond (the batch was applied: add nothing).
 */
export async function claimSequence(tx: Transaction, instance: string, seq: number): Promise<boolean> {
  const rows = await tx.query(
    `INSERT INTO usage_flush (instance, seq) VALUES ($1, $2)
     ON CONFLICT (instance) DO UPDATE SET seq = EXCLUDED.seq, at = now() WHERE usage_flush.seq < EXCLUDED.seq
     RETURNING seq`,
    [instance, seq],
  );
  return rows.length > 0;
}

/** Per tenant, what its counts of [fromMs, toMs) add up to in the ledger: the month counters' fields. */
export interface MonthTotal {
  readonly messages: number;
  readonly ingressBytes: number;
}

/** Every tenant's totals over hours starting in [fromMs, toMs) (the month counters are re-seeded from these). */
export async function ledgerTotals(store: Store, fromMs: number, toMs: number): Promise<Map<string, MonthTotal>> {
  const rows = await store.query<{ tenant: string; m: string; b: string }>(
    `SELECT tenant, sum(messages_pushed) AS m, sum(ingress_bytes) AS b FROM usage_hour
     WHERE hour >= to_timestamp($1::bigint / 1000.0) AND hour < to_timestamp($2::bigint / 1000.0) GROUP BY tenant`,
    [fromMs, toMs],
  );
  return new Map(rows.map((r) => [r.tenant, { messages: Number(r.m), ingressBytes: Number(r.b) }]));
}

/** The usage store over the ledger: what the meter flushes to and the admin API reads when `store.url` is set. */
export class LedgerUsageStore implements UsageStore {
  readonly backing = 'store';
  readonly #store: Store;
  /** Writes of the last applied flush, for the write-rate measurement (bench/ledger-rate.ts). */
  lastWrite: LedgerWrite = { hourRows: 0, refusalRows: 0 };

  constructor(store: Store) {
    this.#store = store;
  }

  async apply(instanceId: string, seq: number, batch: UsageBatch): Promise<void> {
    const written = await this.#store.transaction(async (tx) => {
      if (!(await claimSequence(tx, instanceId, seq))) return null;
      // A process's first flush sweeps the rows of instances long gone.
      // `migrate`'s marker rows stay: one swept would let a second run copy Redis's usage again.
      if (seq === 1) await tx.query(`DELETE FROM usage_flush WHERE at < now() - interval '${FLUSH_ROW_DAYS} days' AND instance NOT LIKE 'migrate:%'`);
      return addToLedger(tx, batch);
    });
    if (written) this.lastWrite = written;
  }

  async read(tenantId: string, fromMs: number, toMs: number): Promise<Map<number, UsageCounts>> {
    const range = 'tenant = $1 AND hour >= to_timestamp($2::bigint / 1000.0) AND hour < to_timestamp($3::bigint / 1000.0)';
    const params = [tenantId, fromMs, toMs];
    const [hours, refusals] = await Promise.all([
      this.#store.query<Record<'h' | 'r' | 'mp' | 'md' | 'a' | 'bi' | 'be', string>>(
        `SELECT (extract(epoch FROM hour) * 1000)::bigint AS h, requests AS r, messages_pushed AS mp, messages_delivered AS md, acks AS a,
           ingress_bytes AS bi, egress_bytes AS be FROM usage_hour WHERE ${range}`,
        params,
      ),
      this.#store.query<{ h: string; code: string; n: string }>(
        `SELECT (extract(epoch FROM hour) * 1000)::bigint AS h, code, n FROM usage_refusal WHERE ${range}`,
        params,
      ),
    ]);
    const out = new Map<number, UsageCounts>();
    const at = (h: string): UsageCounts => {
      const hour = Number(h);
      let c = out.get(hour);
      if (!c) {
        c = new UsageCounts();
        out.set(hour, c);
      }
      return c;
    };
    for (const r of hours) {
      const c = at(r.h);
      c.requests = Number(r.r);
      c.messagesPushed = Number(r.mp);
      c.messagesDelivered = Number(r.md);
      c.acks = Number(r.a);
      c.ingressBytes = Number(r.bi);
      c.egressBytes = Number(r.be);
    }
    for (const r of refusals) at(r.h).refusals[r.code as ErrorCode] = Number(r.n);
    return out;
  }

  /** The store is the app's to close. */
  async close(): Promise<void> {}
}
