/**
 * The durable store: PostgreSQL, the system of record for what operators write (tenants, plans,
 * overrides, API keys, the change log) and what they bill (the usage ledger). Nothing on the request
 * path reads it: it is read at start, on a change and on a periodic check, and written by the admin
 * API and the meter's flush (docs/store.md).
 *
 * Every table lives in one schema of its own (`store.schema`), so the edge can share the broker's
 * database without touching its tables.
 */
import pg from 'pg';
import type { Logger } from '../observability/log.js';
import { MIGRATIONS, type Migration } from './migrations.js';

export interface StoreTarget {
  readonly url: string;
  readonly schema: string;
  /** Bound on connecting and on each statement: a store that hangs must fail an admin write, not queue it. */
  readonly timeoutMs: number;
}

/** A query's parameters as pg takes them. */
export type Params = readonly unknown[];

/** The store's connection pool and whether its last use succeeded. */
export class Store {
  readonly schema: string;
  readonly #pool: pg.Pool;
  readonly #log: Logger;
  #available = true;
  readonly #listeners = new Set<(available: boolean) => void>();

  constructor(target: StoreTarget, log: Logger) {
    this.schema = target.schema;
    this.#log = log;
    this.#pool = new pg.Pool({
      connectionString: target.url,
      // Few connections: the store sees admin writes, flushes and periodic reads, never requests.
      max: 4,
      connectionTimeoutMillis: target.timeoutMs,
      statement_timeout: target.timeoutMs,
      query_timeout: target.timeoutMs,
      idleTimeoutMillis: 30_000,
      // The schema name is a plain identifier (the configuration checks it), safe in a startup option.
      options: `-c search_path=${target.schema}`,
      application_name: 'queen-edge',
    });
    // An idle connection dropped by the server must not become an unhandled 'error' event.
    this.#pool.on('error', () => this.#mark(false));
  }

  /** Whether the last statement reached the store; false from the first failure until one succeeds. */
  get available(): boolean {
    return this.#available;
  }

  /** Called on every change of `available`. */
  onAvailability(listener: (available: boolean) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** One statement; rows as objects. */
  async query<R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, params: Params = []): Promise<R[]> {
    return this.#tracked(async () => (await reached(this.#pool.query<R>(text, params as unknown[]))).rows);
  }

  /** Runs `work` in one transaction on one connection: committed when it resolves, rolled back when it throws. */
  async transaction<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
    return this.#tracked(async () => {
      const client = await reached(this.#pool.connect());
      let broken: Error | undefined;
      // The pool listens for errors of idle connections only: one lost while checked out must not
      // become an uncaught 'error' event (the statement in progress fails on its own).
      const lost = (err: Error): void => {
        broken = new StoreUnavailableError(err);
        this.#mark(false);
      };
      client.on('error', lost);
      try {
        await reached(client.query('BEGIN'));
        const result = await work({ query: async (text, params = []) => (await reached(client.query(text, params as unknown[]))).rows });
        await reached(client.query('COMMIT'));
        return result;
      } catch (err) {
        broken = err as Error;
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        // A connection that failed mid-transaction is discarded rather than handed to the next caller.
        client.off('error', lost);
        client.release(broken instanceof StoreUnavailableError ? broken : undefined);
      }
    });
  }

  /** Creates the schema and applies the steps it lacks (docs/store.md, "Schema"). */
  async migrate(steps: readonly Migration[] = MIGRATIONS): Promise<number> {
    const known = Math.max(0, ...steps.map((s) => s.version));
    return this.transaction(async (tx) => {
      // Edges starting together apply each step once: the first takes the lock, the others then see its work.
      await tx.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`queen-edge:${this.schema}`]);
      await tx.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(this.schema)}`);
      await tx.query(
        'CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())',
      );
      const rows = await tx.query('SELECT coalesce(max(version), 0) AS v FROM schema_version');
      const current = Number(rows[0]?.v ?? 0);
      if (current > known) {
        throw new StoreSchemaError(
          `the store's schema is at version ${current}, newer than this edge knows (${known}): run the newer edge, or a store of this version`,
        );
      }
      for (const step of [...steps].sort((a, b) => a.version - b.version)) {
        if (step.version <= current) continue;
        await tx.query(step.sql);
        await tx.query('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [step.version, step.name]);
        this.#log.info({ version: step.version, step: step.name }, 'store schema step applied');
      }
      return known;
    });
  }

  async close(): Promise<void> {
    await this.#pool.end();
  }

  async #tracked<T>(work: () => Promise<T>): Promise<T> {
    try {
      const result = await work();
      this.#mark(true);
      return result;
    } catch (err) {
      // A statement the server refused (a constraint, bad SQL), or the caller's own error, says the store is there.
      this.#mark(!(err instanceof StoreUnavailableError));
      throw err;
    }
  }

  #mark(available: boolean): void {
    if (available === this.#available) return;
    this.#available = available;
    if (available) this.#log.info('store reachable again');
    else this.#log.warn('store unreachable');
    for (const listener of this.#listeners) listener(available);
  }
}

/** Statements inside Store.transaction. */
export interface Transaction {
  query(text: string, params?: Params): Promise<pg.QueryResultRow[]>;
}

/**
 * The store could not be reached (refused, timed out, dropped mid-statement): the write did not
 * happen, or its outcome is unknown. The admin API answers it with 503 `store_unavailable`.
 */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`store unavailable: ${(cause as Error)?.message ?? String(cause)}`, { cause });
  }
}

/**
 * SQLSTATEs the server sends when it is there but cannot serve: connection failures (08), shutting
 * down or starting up (57P01-57P03), too many clients (53300), authentication refused (28), no
 * such database (3D000). They are an unavailable store, not a refused statement.
 */
function serverUnavailable(err: pg.DatabaseError): boolean {
  const code = err.code ?? '';
  return code.startsWith('08') || code.startsWith('28') || code === '57P01' || code === '57P02' || code === '57P03' || code === '53300' || code === '3D000';
}

/** A call to the server; any failure but a statement the server refused means it was not reached. */
async function reached<T>(call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    throw err instanceof pg.DatabaseError && !serverUnavailable(err) ? err : new StoreUnavailableError(err);
  }
}

/** The store refused to start: its schema is newer than this edge. */
export class StoreSchemaError extends Error {}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** Opens the configured store and brings its schema up to date; null when none is configured. */
export async function openStore(target: StoreTarget | null, log: Logger): Promise<Store | null> {
  if (!target) return null;
  const store = new Store(target, log);
  await store.migrate();
  return store;
}
