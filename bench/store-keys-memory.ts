/**
 * Heap held per API key when keys live in the durable store (every record in memory per
 * instance, src/keys/store-keys.ts): writes N key rows (100 per tenant) into a fresh schema of a
 * PostgreSQL, measures the heap before and after the edge's load (after collections) and the
 * load's time, then drops the schema.
 *
 *   node --expose-gc --import tsx bench/store-keys-memory.ts N [postgres://postgres@127.0.0.1:5432/postgres]
 */
import { randomBytes } from 'node:crypto';
import { mintKey } from '../src/keys/format.js';
import { openStoreKeys } from '../src/keys/store-keys.js';
import { createLogger } from '../src/observability/log.js';
import { ChangeFeed } from '../src/store/changes.js';
import { Store } from '../src/store/connection.js';

const N = Number(process.argv[2] ?? 100_000);
const url = process.argv[3] ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');
const log = createLogger('silent');
const store = new Store({ url, schema: `qe_bench_${randomBytes(4).toString('hex')}`, timeoutMs: 60_000 }, log);
await store.migrate();
const ROWS = 5000;
for (let i = 0; i < N; i += ROWS) {
  const values: unknown[] = [];
  const rows: string[] = [];
  for (let j = i; j < Math.min(N, i + ROWS); j++) {
    const k = mintKey();
    const at = values.length;
    rows.push(`($${at + 1}, $${at + 2}, $${at + 3}, $${at + 4}, $${at + 5}, NULL, $${at + 6})`);
    values.push(k.id, `tenant-${Math.floor(j / 100)}`, `billing producer ${j % 100}`, ['read-write'], Date.now(), k.hash);
  }
  await store.query(`INSERT INTO api_keys (id, tenant, name, roles, created_at, expires_at, hash) VALUES ${rows.join(',')}`, values);
}
gc();
gc();
const before = process.memoryUsage().heapUsed;
const started = performance.now();
const keys = await openStoreKeys(store, new ChangeFeed(store, log), null, { keyPrefix: 'bench:', cluster: [] }, log);
const loadMs = performance.now() - started;
gc();
gc();
const held = process.memoryUsage().heapUsed - before;
console.log(JSON.stringify({ keys: N, loadMs: Math.round(loadMs), heapMiB: Number((held / 2 ** 20).toFixed(1)), bytesPerKey: Math.round(held / N) }));
await keys.close();
await store.query(`DROP SCHEMA ${store.schema} CASCADE`);
await store.close();
