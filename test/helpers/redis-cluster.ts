/**
 * A real Redis Cluster for tests: three masters and three replicas, redis-server children on free
 * loopback ports in a temporary directory, joined by `redis-cli --cluster create`. A test file
 * starts one in beforeAll and stops it in afterAll; a test may kill a node (a crash) and heal the
 * cluster, after which that node rejoins as a replica of whoever took over its slots.
 *
 * Ready means more than `cluster_state:ok`: that comes before the replicas have synced, and a
 * replica that never synced is never promoted, so start() also waits for `master_link_status:up`
 * on every replica.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import calculateSlot from 'cluster-key-slot';
import { waitFor, waitForValue } from './wait.js';

const run = promisify(execFile);
/** Redis Cluster's bus listens on the client port plus this. */
const BUS_OFFSET = 10_000;

/** Whether 127.0.0.1:port can be bound right now. */
function canBind(port: number): Promise<boolean> {
  return new Promise((done) => {
    const s = createServer();
    s.once('error', () => done(false));
    s.listen({ host: '127.0.0.1', port }, () => s.close(() => done(true)));
  });
}

/**
 * A port whose bus port (port + 10000) is free too. Drawn below the kernel's ephemeral range
 * (32768+), where port-0 binds of other tests do not land; `taken` avoids handing out one twice.
 */
async function freeClusterPort(taken: Set<number>): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 12_000 + Math.floor(Math.random() * 10_000);
    if (taken.has(port)) continue;
    if ((await canBind(port)) && (await canBind(port + BUS_OFFSET))) {
      taken.add(port);
      return port;
    }
  }
  throw new Error('no free port pair for a Redis Cluster node');
}

/** A fail-fast probe client for one node. */
function probe(port: number): Redis {
  const r = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    commandTimeout: 1000,
  });
  r.on('error', () => {});
  return r;
}

/** Runs one command on a node with a short-lived connection; null when the node does not answer. */
async function ask(port: number, ...args: string[]): Promise<string | null> {
  const r = probe(port);
  try {
    await r.connect();
    return String(await r.call(args[0]!, ...args.slice(1)));
  } catch {
    return null;
  } finally {
    r.disconnect();
  }
}

/** One redis-server of the cluster. */
export interface ClusterNode {
  readonly port: number;
  child: ChildProcess | null;
}

/** A running local Redis Cluster (see the file comment). */
export class RedisCluster {
  readonly nodes: ClusterNode[];
  readonly #dir: string;
  readonly #clients: Redis[] = [];

  private constructor(dir: string, ports: number[]) {
    this.#dir = dir;
    this.nodes = ports.map((port) => ({ port, child: null }));
  }

  /** Starts six nodes, creates the cluster (3 masters, 1 replica each) and waits until it is healthy. */
  static async start(): Promise<RedisCluster> {
    const dir = await mkdtemp(join(tmpdir(), 'qe-redis-cluster-'));
    const taken = new Set<number>();
    const ports: number[] = [];
    for (let i = 0; i < 6; i++) ports.push(await freeClusterPort(taken));
    const cluster = new RedisCluster(dir, ports);
    LIVE.add(cluster);
    try {
      await Promise.all(cluster.nodes.map((n) => cluster.#spawn(n)));
      await run('redis-cli', ['--cluster', 'create', ...ports.map((p) => `127.0.0.1:${p}`), '--cluster-replicas', '1', '--cluster-yes'], { timeout: 30_000 });
      await cluster.waitHealthy();
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  /** Seed nodes for the edge's `redis.cluster` setting. */
  get seeds(): string[] {
    return this.nodes.map((n) => `127.0.0.1:${n.port}`);
  }

  async #spawn(node: ClusterNode): Promise<void> {
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(node.port),
        '--bind',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(this.#dir, `nodes-${node.port}.conf`),
        '--cluster-node-timeout',
        '2000',
        // A replica held back from failing over (holdFailover) stays eligible however long it was held.
        '--cluster-replica-validity-factor',
        '0',
        // A replica syncs at once, not after the 5 s Redis waits by default for others to share the transfer.
        '--repl-diskless-sync-delay',
        '0',
        '--dir',
        this.#dir,
        '--save',
        '',
        '--appendonly',
        'no',
      ],
      { stdio: 'ignore' },
    );
    node.child = child;
    await waitFor(async () => (await ask(node.port, 'PING')) === 'PONG', 10_000, `cluster node on ${node.port}`);
  }

  /**
   * Resolves when every running node reports `cluster_state:ok`, knows the same number of live
   * masters (three) and every replica's link to its master is up.
   */
  async waitHealthy(timeoutMs = 20_000): Promise<void> {
    await waitFor(
      async () => {
        for (const n of this.nodes) {
          if (!n.child) continue;
          const info = await ask(n.port, 'CLUSTER', 'INFO');
          if (!info?.includes('cluster_state:ok')) return false;
          const repl = await ask(n.port, 'INFO', 'replication');
          if (repl === null) return false;
          if (repl.includes('role:slave') && !repl.includes('master_link_status:up')) return false;
        }
        return (await this.masters()).length === 3;
      },
      timeoutMs,
      'a healthy Redis Cluster (state ok, replicas synced)',
    );
  }

  /** Ports of the running nodes that are masters right now. */
  async masters(): Promise<number[]> {
    const out: number[] = [];
    for (const n of this.nodes) {
      if (!n.child) continue;
      const repl = await ask(n.port, 'INFO', 'replication');
      if (repl?.includes('role:master')) out.push(n.port);
    }
    return out;
  }

  /** The port of the master serving `key`'s slot, as the cluster itself reports it. */
  async masterOf(key: string): Promise<number> {
    const slot = calculateSlot(key);
    for (const n of this.nodes) {
      if (!n.child) continue;
      const r = probe(n.port);
      try {
        await r.connect();
        const owner = (await r.cluster('SLOTS')).find(([from, to]) => slot >= from && slot <= to);
        if (owner?.[2]) return owner[2][1];
      } catch {
        // Ask the next node.
      } finally {
        r.disconnect();
      }
    }
    throw new Error(`no node reports an owner for slot ${slot}`);
  }

  /** The port of the running node that replicates `master`. */
  async replicaOf(master: number): Promise<number> {
    return waitForValue(
      async () => {
        for (const n of this.nodes) {
          if (!n.child || n.port === master) continue;
          if ((await ask(n.port, 'INFO', 'replication'))?.includes(`master_port:${master}\r\n`)) return n.port;
        }
        return undefined;
      },
      10_000,
      `a node replicating ${master}`,
    );
  }

  /**
   * Holds a replica back from taking over its failed master (`cluster-replica-no-failover`), or lets
   * it: a test can then see what happens while the master is away for as long as it needs to.
   */
  async holdFailover(replica: number, held: boolean): Promise<void> {
    const value = held ? 'yes' : 'no';
    await waitFor(
      async () => (await ask(replica, 'CONFIG', 'SET', 'cluster-replica-no-failover', value)) === 'OK',
      10_000,
      `${replica} to take cluster-replica-no-failover ${value}`,
    );
  }

  /**
   * Starts every killed node again on its port and config file (a failed-over master rejoins as a
   * replica of its successor) and waits until the cluster is healthy.
   */
  async heal(timeoutMs = 30_000): Promise<void> {
    for (const n of this.nodes) if (!n.child) await this.#spawn(n);
    await this.waitHealthy(timeoutMs);
  }

  /** A test client for the cluster (closed by stop()). */
  async client(): Promise<Cluster> {
    const c = new Cluster(this.seeds.slice(0, 3), { enableOfflineQueue: false, redisOptions: { commandTimeout: 2000, maxRetriesPerRequest: 0 } });
    c.on('error', () => {});
    await waitFor(() => c.status === 'ready', 10_000, 'a cluster client');
    this.#clients.push(c as unknown as Redis);
    return c;
  }

  /** A plain client for one node, e.g. to read its INFO commandstats (closed by stop()). */
  async nodeClient(port: number): Promise<Redis> {
    const r = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: 2000 });
    r.on('error', () => {});
    await waitFor(() => r.status === 'ready', 5000, `a client for ${port}`);
    this.#clients.push(r);
    return r;
  }

  /** Kills a node like a crash (SIGKILL) and waits until it is gone. */
  async kill(port: number): Promise<void> {
    const node = this.nodes.find((n) => n.port === port)!;
    const child = node.child;
    node.child = null;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((done) => {
      child.once('exit', () => done());
      child.kill('SIGKILL');
    });
  }

  /** Kills every node and removes the directory; safe to call twice. */
  async stop(): Promise<void> {
    LIVE.delete(this);
    for (const c of this.#clients.splice(0)) c.disconnect();
    await Promise.all(this.nodes.map((n) => this.kill(n.port)));
    await rm(this.#dir, { recursive: true, force: true });
  }
}

/** Clusters not stopped yet: killed if the test process exits without its afterAll. */
const LIVE = new Set<RedisCluster>();
process.once('exit', () => {
  for (const c of LIVE) for (const n of c.nodes) n.child?.kill('SIGKILL');
});
