import { afterAll, describe, expect, it } from 'vitest';
import { Store, StoreSchemaError, StoreUnavailableError } from '../../src/store/connection.js';
import { appendChange, ChangeFeed, changesSince, latestChange } from '../../src/store/changes.js';
import { createLogger } from '../../src/observability/log.js';
import { dropStore, PrivatePostgres, uniqueStore } from '../helpers/pg.js';
import { waitFor } from '../helpers/wait.js';

const log = createLogger('silent');
const steps = [
  { version: 1, name: 'first', sql: 'CREATE TABLE things (id text PRIMARY KEY)' },
  { version: 2, name: 'second', sql: 'ALTER TABLE things ADD COLUMN n integer NOT NULL DEFAULT 0' },
];

describe('store schema', () => {
  const target = uniqueStore();
  afterAll(() => dropStore(target));

  it('applies each step once, in order, in its own schema, even with edges starting together', async () => {
    const stores = [new Store(target, log), new Store(target, log), new Store(target, log)];
    try {
      expect(await Promise.all(stores.map((s) => s.migrate(steps)))).toEqual([2, 2, 2]);
      const rows = await stores[0]!.query('SELECT version, name FROM schema_version ORDER BY version');
      expect(rows).toEqual([
        { version: 1, name: 'first' },
        { version: 2, name: 'second' },
      ]);
      await stores[0]!.query("INSERT INTO things (id, n) VALUES ('a', 1)");
      const qualified = await stores[1]!.query(`SELECT n FROM ${target.schema}.things`);
      expect(qualified).toEqual([{ n: 1 }]);
    } finally {
      await Promise.all(stores.map((s) => s.close()));
    }
  });

  it('refuses a schema newer than the edge knows', async () => {
    const store = new Store(target, log);
    try {
      await expect(store.migrate(steps.slice(0, 1))).rejects.toBeInstanceOf(StoreSchemaError);
    } finally {
      await store.close();
    }
  });

  it('rolls a failed transaction back', async () => {
    const store = new Store(target, log);
    try {
      await expect(
        store.transaction(async (tx) => {
          await tx.query("INSERT INTO things (id) VALUES ('b')");
          await tx.query("INSERT INTO things (id) VALUES ('b')");
        }),
      ).rejects.toThrow(/duplicate key/);
      expect(await store.query("SELECT id FROM things WHERE id = 'b'")).toEqual([]);
      // A refused statement still reached the store.
      expect(store.available).toBe(true);
    } finally {
      await store.close();
    }
  });
});

describe('store availability', () => {
  it('turns unavailable when the server stops and available when it answers again', async () => {
    const server = await PrivatePostgres.start();
    const store = new Store({ url: server.url, schema: 'queen_edge', timeoutMs: 1000 }, log);
    const seen: boolean[] = [];
    store.onAvailability((a) => seen.push(a));
    try {
      await store.migrate(steps);
      server.stop();
      await expect(store.query('SELECT 1')).rejects.toThrow();
      expect(store.available).toBe(false);
      server.restart();
      await waitFor(async () => (await store.query('SELECT 1 AS one').catch(() => []))[0]?.one === 1, 10_000);
      expect(store.available).toBe(true);
      expect(seen).toEqual([false, true]);
      expect(await store.query('SELECT count(*)::int AS n FROM schema_version')).toEqual([{ n: 2 }]);
    } finally {
      await store.close();
      server.destroy();
    }
  }, 60_000);
});

describe('change log', () => {
  const target = uniqueStore();
  afterAll(() => dropStore(target));

  it('hands each change once, in commit order, to the subscribers of its kind, on a poke and on its own', async () => {
    const writer = new Store(target, log);
    const reader = new Store(target, log);
    await writer.migrate();
    const feed = new ChangeFeed(reader, log, 50);
    const tenants: number[] = [];
    const plans: string[] = [];
    feed.subscribe('tenant:', (cs) => {
      tenants.push(...cs.map((c) => c.seq));
    });
    feed.subscribe('plan:', (cs) => {
      plans.push(...cs.map((c) => c.subject));
    });
    try {
      const first = await writer.transaction((tx) => appendChange(tx, target.schema, { actor: 'test', subject: 'tenant:a', action: 'put' }));
      feed.start(first);
      // Writers racing: sequence numbers still commit in order, so none is skipped.
      const seqs = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          writer.transaction((tx) => appendChange(tx, target.schema, { actor: 'test', subject: i % 2 ? 'tenant:b' : 'plan:p', action: 'put', detail: { i } })),
        ),
      );
      await feed.poke();
      expect(tenants).toEqual(seqs.filter((_, i) => i % 2).sort((a, b) => a - b));
      expect(plans).toHaveLength(10);
      const late = await writer.transaction((tx) => appendChange(tx, target.schema, { actor: 'test', subject: 'tenant:c', action: 'delete' }));
      // No poke: the period finds it.
      await waitFor(() => tenants.includes(late), 10_000, 'the periodic read');
      expect(await latestChange(reader)).toBe(late);
      expect((await changesSince(reader, late - 1))[0]).toMatchObject({ actor: 'test', subject: 'tenant:c', action: 'delete' });
    } finally {
      await feed.stop();
      await Promise.all([writer.close(), reader.close()]);
    }
  });
});

describe('a server that is there but cannot serve', () => {
  it('counts as unavailable: a database that does not exist (3D000) is no refused statement', async () => {
    const store = new Store({ ...uniqueStore(), url: 'postgres://postgres@127.0.0.1:5432/qe_no_such_database' }, log);
    try {
      await expect(store.query('SELECT 1')).rejects.toBeInstanceOf(StoreUnavailableError);
      expect(store.available).toBe(false);
    } finally {
      await store.close();
    }
  });
});
