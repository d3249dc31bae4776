/**
 * Real Redis for tests: the shared server on 127.0.0.1:6379 (with a unique key prefix per
 * file), or a private redis-server child on a free port for tests that kill, pause or count.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort } from './ports.js';
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { waitFor } from './wait.js';

/** The shared test Redis. */
export const SHARED_REDIS_URL = process.env.QE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A key prefix no other test file uses. */
export function uniquePrefix(): string {
  return `qe-test-${randomBytes(4).toString('hex')}:`;
}

/** A fail-fast client like the production one (no offline queue), connected. */
export async function connectTest(url: string, commandTimeout = 200): Promise<Redis> {
  const client = new Redis(url, { enableOfflineQueue: false, commandTimeout, maxRetriesPerRequest: 0, retryStrategy: (n) => Math.min(n * 50, 200) });
  client.on('error', () => {});
  await waitFor(() => client.status === 'ready', 5000);
  return client;
}

/** Deletes every key under a prefix. */
export async function flushPrefix(client: Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length > 0) await client.del(...keys);
  } while (cursor !== '0');
}

/** INFO commandstats as command → calls. */
export async function commandCalls(client: Redis): Promise<Map<string, number>> {
  const info = await client.info('commandstats');
  const calls = new Map<string, number>();
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1]!, Number(m[2]));
  return calls;
}

/** A private redis-server child that a test may stop, pause and start again on the same port. */
export class PrivateRedis {
  readonly port: number;
  #child: ChildProcess | null = null;

  private constructor(port: number) {
    this.port = port;
  }

  /** Starts a server on a free port and waits until it answers. */
  static async start(): Promise<PrivateRedis> {
    const r = new PrivateRedis(await freePort());
    await r.restart();
    return r;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** (Re)starts the server on its port; resolves once it accepts commands. */
  async restart(): Promise<void> {
    if (this.#child) return;
    const child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    this.#child = child;
    await waitFor(
      async () => {
        const probe = new Redis(this.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
        probe.on('error', () => {});
        try {
          await probe.connect();
          return (await probe.ping()) === 'PONG';
        } catch {
          return false;
        } finally {
          probe.disconnect();
        }
      },
      5000,
      `redis-server on ${this.port}`,
    );
  }

  /** Kills the server (SIGKILL: no goodbye, like a crash) and waits for it to exit. */
  async kill(): Promise<void> {
    const child = this.#child;
    if (!child) return;
    this.#child = null;
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  }

  /** Freezes the server (SIGSTOP): connections stay open, commands time out. */
  pause(): void {
    this.#child?.kill('SIGSTOP');
  }

  /** Thaws a paused server. */
  resume(): void {
    this.#child?.kill('SIGCONT');
  }
}
