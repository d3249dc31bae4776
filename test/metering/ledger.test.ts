/**
 * The usage ledger in PostgreSQL: a flush is applied once whatever is retried (the same sequence
 * number twice, a commit whose reply was lost), two instances add up, and hours and months stay
 * apart. Real PostgreSQL, a schema of its own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Meter } from '../../src/metering/meter.js';
import { HOUR_MS, UsageCounts } from '../../src/metering/counts.js';
import { LedgerUsageStore, ledgerTotals } from '../../src/metering/ledger.js';
import type { UsageBatch } from '../../src/metering/store.js';
import type { Exchange } from '../../src/metering/recorder.js';
import { createLogger } from '../../src/observability/log.js';
import { Store, type Transaction } from '../../src/store/connection.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';

const log = createLogger('silent');

/** A store whose next transaction commits and then fails to say so, as a reply lost on the wire. */
class LosingReplies extends Store {
  loseNext = false;

  override async transaction<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
    const result = await super.transaction(work);
    if (this.loseNext) {
      this.loseNext = false;
      throw new Error('connection reset after COMMIT');
    }
    return result;
  }
}

function counts(requests: number, extra: Partial<UsageCounts> = {}): UsageCounts {
  return Object.assign(new UsageCounts(), { requests, ingressBytes: requests * 10 }, extra);
}

function batch(entries: Array<[string, number, UsageCounts]>): UsageBatch {
  const out = new Map<string, Map<number, UsageCounts>>();
  for (const [tenant, hour, c] of entries) {
    const hours = out.get(tenant) ?? new Map<number, UsageCounts>();
    hours.set(hour, c);
    out.set(tenant, hours);
  }
  return out;
}

const exchange = (tenantId: string, bytesIn: number): Exchange =>
  ({ tenantId, bytesIn, bytesOut: 0, code: null, status: 200, route: { meter: 'none' } }) as unknown as Exchange;

const END_OF_NOV = Date.UTC(2026, 10, 30, 23, 0, 0);
const START_OF_DEC = Date.UTC(2026, 11, 1, 0, 0, 0);

describe('usage ledger', () => {
  const target = uniqueStore();
  let store: LosingReplies;
  let ledger: LedgerUsageStore;

  beforeAll(async () => {
    store = new LosingReplies(target, log);
    await store.migrate();
    ledger = new LedgerUsageStore(store);
  });
  afterAll(async () => {
    await store.close();
    await dropStore(target);
  });

  it('applies a batch once: the same sequence number again adds nothing, a later one adds', async () => {
    const b = batch([['acme', START_OF_DEC, counts(3, { refusals: { rate_limited: 2 } })]]);
    await ledger.apply('i1', 1, b);
    await ledger.apply('i1', 1, b);
    let read = await ledger.read('acme', START_OF_DEC, START_OF_DEC + HOUR_MS);
    expect(read.get(START_OF_DEC)).toMatchObject({ requests: 3, ingressBytes: 30, refusals: { rate_limited: 2 } });
    await ledger.apply('i1', 2, b);
    await ledger.apply('i1', 1, b);
    read = await ledger.read('acme', START_OF_DEC, START_OF_DEC + HOUR_MS);
    expect(read.get(START_OF_DEC)).toMatchObject({ requests: 6, ingressBytes: 60, refusals: { rate_limited: 4 } });
  });

  it("a flush whose commit's reply was lost is retried by the meter and counted once", async () => {
    const t = 'lost-reply';
    const meter = new Meter({ store: ledger, log, clock: () => START_OF_DEC + 5, instanceId: 'i-lost' });
    for (let i = 0; i < 5; i++) meter.record(exchange(t, 7));
    store.loseNext = true;
    expect(await meter.flush()).toBe(false);
    // Committed already: the retry carries the same number and is skipped.
    expect(await meter.flush()).toBe(true);
    meter.record(exchange(t, 7));
    expect(await meter.flush()).toBe(true);
    const read = await ledger.read(t, START_OF_DEC, START_OF_DEC + HOUR_MS);
    expect(read.get(START_OF_DEC)).toMatchObject({ requests: 6, ingressBytes: 42 });
  });

  it('a flush whose transaction failed adds nothing until its retry adds it whole', async () => {
    const t = 'failed-tx';
    const b = batch([
      [t, START_OF_DEC, counts(4)],
      ['x'.repeat(3), START_OF_DEC, counts(1)],
    ]);
    // A failure inside the transaction (here a statement refused after the sequence row moved) rolls the sequence back too.
    await expect(
      store.transaction(async (tx) => {
        await tx.query('INSERT INTO usage_flush (instance, seq) VALUES ($1, $2)', ['i-fail', 1]);
        await tx.query('SELECT 1/0');
      }),
    ).rejects.toThrow();
    await ledger.apply('i-fail', 1, b);
    expect((await ledger.read(t, START_OF_DEC, START_OF_DEC + HOUR_MS)).get(START_OF_DEC)?.requests).toBe(4);
  });

  it('two instances with the same sequence numbers add up', async () => {
    const t = 'two';
    await ledger.apply('a', 1, batch([[t, START_OF_DEC, counts(2)]]));
    await ledger.apply('b', 1, batch([[t, START_OF_DEC, counts(5)]]));
    await Promise.all([ledger.apply('a', 2, batch([[t, START_OF_DEC, counts(1)]])), ledger.apply('a', 2, batch([[t, START_OF_DEC, counts(1)]]))]);
    expect((await ledger.read(t, START_OF_DEC, START_OF_DEC + HOUR_MS)).get(START_OF_DEC)?.requests).toBe(8);
  });

  it('keeps hours apart, and month totals stop at the month boundary', async () => {
    const t = 'months';
    await ledger.apply(
      'm',
      1,
      batch([
        [t, END_OF_NOV, counts(10, { messagesPushed: 100 })],
        [t, START_OF_DEC, counts(1, { messagesPushed: 1 })],
        [t, START_OF_DEC + HOUR_MS, counts(2, { messagesPushed: 2 })],
      ]),
    );
    const read = await ledger.read(t, END_OF_NOV, START_OF_DEC + 2 * HOUR_MS);
    expect([...read.keys()].sort()).toEqual([END_OF_NOV, START_OF_DEC, START_OF_DEC + HOUR_MS]);
    expect(read.get(START_OF_DEC + HOUR_MS)?.requests).toBe(2);
    const dec = await ledgerTotals(store, START_OF_DEC, Date.UTC(2027, 0, 1));
    expect(dec.get(t)).toEqual({ messages: 3, ingressBytes: 30 });
    const nov = await ledgerTotals(store, Date.UTC(2026, 10, 1), START_OF_DEC);
    expect(nov.get(t)).toEqual({ messages: 100, ingressBytes: 100 });
  });
});
