/**
 * The usage ledger's write rate (BENCHMARKS.md, "Usage ledger"): one flush carrying usage of
 * `--tenants` tenants (default 100,000, each with requests, messages and bytes in the current hour,
 * one in ten with a refusal too), applied `--flushes` times to a fresh schema, as the meter does
 * once a second. Prints rows and ms per flush. Also the memory one buffered tenant-hour holds in
 * the meter (what store.usageBufferEntries bounds), from the heap before and after counting one
 * request for each tenant (run with --expose-gc for a steady figure).
 *
 *   npx tsx bench/ledger-rate.ts [--url postgres://...] [--tenants 100000] [--flushes 5]
 */
import { parseArgs } from 'node:util';
import { UsageCounts } from '../src/metering/counts.js';
import { LedgerUsageStore } from '../src/metering/ledger.js';
import { Meter } from '../src/metering/meter.js';
import type { Exchange } from '../src/metering/recorder.js';
import type { UsageBatch } from '../src/metering/store.js';
import { createLogger } from '../src/observability/log.js';
import { Store } from '../src/store/connection.js';
import { loadAverage } from './procs.js';

const { values: v } = parseArgs({
  options: {
    url: { type: 'string', default: process.env.QE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres' },
    tenants: { type: 'string', default: '100000' },
    flushes: { type: 'string', default: '5' },
  },
});
const tenants = Number(v.tenants);
const flushes = Number(v.flushes);
const log = createLogger('silent');

function batchOf(hour: number): UsageBatch {
  const out = new Map<string, Map<number, UsageCounts>>();
  for (let i = 0; i < tenants; i++) {
    const c = Object.assign(new UsageCounts(), { requests: 5, messagesPushed: 7, messagesDelivered: 3, acks: 3, ingressBytes: 900, egressBytes: 400 });
    if (i % 10 === 0) c.refusals = { rate_limited: 1 };
    out.set(`tenant-${i}`, new Map([[hour, c]]));
  }
  return out;
}

function bufferedBytesPerEntry(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  gc?.();
  const before = process.memoryUsage().heapUsed;
  const meter = new Meter({ store: new LedgerUsageStore(null as unknown as Store), log, maxEntries: tenants + 1 });
  for (let i = 0; i < tenants; i++) {
    meter.record({
      tenantId: `buffered-${i}`,
      bytesIn: 900,
      bytesOut: 400,
      code: i % 10 === 0 ? 'rate_limited' : null,
      status: 200,
      route: { meter: 'none' },
    } as unknown as Exchange);
  }
  gc?.();
  const bytes = (process.memoryUsage().heapUsed - before) / tenants;
  if (meter.stats().bufferedEntries !== tenants) throw new Error('meter did not hold every tenant-hour');
  return bytes;
}

const schema = `qe_bench_ledger_${process.pid}`;
const store = new Store({ url: v.url!, schema, timeoutMs: 30_000 }, log);
try {
  await store.migrate();
  const ledger = new LedgerUsageStore(store);
  const hour = Date.now() - (Date.now() % 3_600_000);
  const batch = batchOf(hour);
  console.log(`ledger write rate: ${tenants} tenants with usage, ${flushes} flushes, load average ${loadAverage()}`);
  const times: number[] = [];
  for (let seq = 1; seq <= flushes; seq++) {
    const t0 = performance.now();
    await ledger.apply('bench', seq, batch);
    const ms = performance.now() - t0;
    times.push(ms);
    const w = ledger.lastWrite;
    // The first flush inserts every row; the later ones update them (the steady state within an hour).
    console.log(
      `flush ${seq}: ${w.hourRows} hour rows + ${w.refusalRows} refusal rows in ${ms.toFixed(0)} ms (${((w.hourRows + w.refusalRows) / (ms / 1000)).toFixed(0)} rows/s)`,
    );
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(`median ${sorted[Math.floor((sorted.length - 1) / 2)]!.toFixed(0)} ms per flush of ${tenants} tenants`);
  console.log(`meter buffer: ${bufferedBytesPerEntry().toFixed(0)} bytes of heap per buffered tenant-hour`);
} finally {
  await store.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => {});
  await store.close();
}
