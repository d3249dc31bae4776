/**
 * Real PostgreSQL for tests: the shared server on 127.0.0.1:5432 (with a schema of its own per
 * test), or a private server on a free port for tests that stop and start it.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type { StoreTarget } from '../../src/store/connection.js';
import { freePort } from './ports.js';

/** The shared test PostgreSQL (scripts/setup-test-env.sh starts it). */
export const SHARED_PG_URL = process.env.QE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A store target no other test uses: the shared server, a fresh schema. */
export function uniqueStore(url = SHARED_PG_URL, timeoutMs = 2000): StoreTarget {
  return { url, schema: `qe_test_${randomBytes(5).toString('hex')}`, timeoutMs };
}

/** Drops a test's schema and everything in it. */
export async function dropStore(target: StoreTarget): Promise<void> {
  const client = new pg.Client({ connectionString: target.url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${target.schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** Debian keeps each major version's server binaries apart; the newest installed one. */
function serverBin(name: string): string {
  const versions = readdirSync('/usr/lib/postgresql').sort((a, b) => Number(b) - Number(a));
  return join('/usr/lib/postgresql', versions[0]!, 'bin', name);
}

/** PostgreSQL refuses to run as root: as root, its tools run as the postgres user. */
function asServerUser(cmd: string, args: string[]): void {
  const root = process.getuid?.() === 0;
  execFileSync(root ? 'runuser' : cmd, root ? ['-u', 'postgres', '--', cmd, ...args] : args, { stdio: 'ignore', timeout: 60_000 });
}

/** A private PostgreSQL server that a test may stop (fast shutdown or a kill) and start again on the same port. */
export class PrivatePostgres {
  readonly port: number;
  readonly #dir: string;
  #running = false;

  private constructor(port: number, dir: string) {
    this.port = port;
    this.#dir = dir;
  }

  /** Creates a cluster in a temporary directory and starts it. */
  static async start(): Promise<PrivatePostgres> {
    const dir = mkdtempSync(join(tmpdir(), 'qe-pg-'));
    chmodSync(dir, 0o700);
    if (process.getuid?.() === 0)
      chownSync(dir, Number(execFileSync('id', ['-u', 'postgres']).toString()), Number(execFileSync('id', ['-g', 'postgres']).toString()));
    asServerUser(serverBin('initdb'), ['-D', dir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
    const server = new PrivatePostgres(await freePort(), dir);
    server.restart();
    return server;
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  /** (Re)starts the server; returns once it accepts connections. */
  restart(): void {
    if (this.#running) return;
    const options = `-p ${this.port} -c listen_addresses=127.0.0.1 -k ${this.#dir} -c fsync=off -c full_page_writes=off`;
    asServerUser(serverBin('pg_ctl'), ['-D', this.#dir, '-o', options, '-l', join(this.#dir, 'server.log'), '-w', 'start']);
    this.#running = true;
  }

  /** Stops the server: `immediate` is a crash (no checkpoint), `fast` a clean shutdown. */
  stop(mode: 'fast' | 'immediate' = 'immediate'): void {
    if (!this.#running) return;
    asServerUser(serverBin('pg_ctl'), ['-D', this.#dir, '-m', mode, '-w', 'stop']);
    this.#running = false;
  }

  /** Stops the server and deletes its files. */
  destroy(): void {
    this.stop();
    rmSync(this.#dir, { recursive: true, force: true });
  }
}
