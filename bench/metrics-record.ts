/**
 * What recording one request's metrics costs with 2,000 tenants taking turns (BENCHMARKS.md, many
 * tenants): nanoseconds per `request()` call, median and best of 7 rounds of 2 million.
 *
 *   npx tsx bench/metrics-record.ts [ROOT]   # ROOT: a checkout whose src/ to measure (default this one)
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { REPO_ROOT } from './edge.js';

const root = resolve(process.argv[2] ?? REPO_ROOT);
const { createMetrics } = (await import(pathToFileURL(`${root}/src/observability/metrics.ts`).href)) as typeof import('../src/observability/metrics.js');
const m = createMetrics({ limiterMode: () => 'redis', brokers: () => [], usage: () => new Map(), flush: () => ({ flushes: 0, failures: 0, lagMs: 0 }) });
const ids = Array.from({ length: 2000 }, (_, i) => `m${String(i).padStart(6, '0')}`);
const CALLS = 2_000_000;
const run = (): void => {
  for (let i = 0; i < CALLS; i++) m.request(ids[i % ids.length]!, 'push', 201, null, 1.2, 0.8, 'admitted');
};
run();
const rounds: number[] = [];
for (let k = 0; k < 7; k++) {
  const t0 = process.hrtime.bigint();
  run();
  rounds.push(Number(process.hrtime.bigint() - t0) / CALLS);
}
rounds.sort((a, b) => a - b);
process.stdout.write(`${root}: ${rounds[3]!.toFixed(1)} ns per request() (median of 7), best ${rounds[0]!.toFixed(1)}\n`);
