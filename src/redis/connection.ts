/**
 * The Redis connection the limiter, the tenant directory and the meter share, configured to fail
 * fast: a Redis that is slow or gone must cost a request at most `timeoutMs`, never a queue of
 * waiting requests. So: no offline queue, a short command timeout, no per-request retries, no
 * auto-pipelining (it halved throughput here). Reconnects keep trying in the background.
 * A Redis Cluster is reached through its seed nodes (docs/redis.md).
 */
import { Cluster, Redis } from 'ioredis';

/** Either client; both route a script by its first key's slot. */
export type RedisClient = Redis | Cluster;

/** Reconnect delay: quick first tries, then once a second, so recovery needs no restart. */
function reconnectDelay(times: number): number {
  return Math.min(times * 100, 1000);
}

/** Where Redis is (the `redis` section of the configuration, or a part of it). */
export interface RedisTarget {
  readonly url: string | null;
  /** Seed nodes (`host:port`) of a Redis Cluster; non-empty means Cluster mode. */
  readonly cluster: readonly string[];
  readonly timeoutMs: number;
}

/** Opens the configured Redis (cluster seeds win over url); null when none is configured. */
export function connectRedis(cfg: RedisTarget): RedisClient | null {
  const common = {
    commandTimeout: cfg.timeoutMs,
    maxRetriesPerRequest: 0,
    enableAutoPipelining: false,
    connectTimeout: Math.max(1000, cfg.timeoutMs * 20),
  };
  let client: RedisClient;
  if (cfg.cluster.length > 0) {
    // The slot map is refreshed every second, so after a failover admits find the promoted replica
    // quickly even when no MOVED reply tells them (docs/redis.md).
    client = new Cluster([...cfg.cluster], {
      enableOfflineQueue: false,
      clusterRetryStrategy: reconnectDelay,
      slotsRefreshInterval: 1000,
      redisOptions: common,
    });
  } else if (cfg.url) {
    client = tracked(new Redis(cfg.url, { ...common, enableOfflineQueue: false, retryStrategy: reconnectDelay }), new Set());
  } else {
    return null;
  }
  // Connection errors repeat on every reconnect attempt; the limiter logs the mode change once.
  client.on('error', () => {});
  return client;
}

/** The connections opened from one configured client: itself and its duplicates (usage store, subscriber), for useCredentials. */
const families = new WeakMap<Redis, Set<Redis>>();

function tracked(client: Redis, family: Set<Redis>): Redis {
  family.add(client);
  families.set(client, family);
  const duplicate = client.duplicate.bind(client);
  client.duplicate = (override) => tracked(duplicate(override), family);
  return client;
}

/**
 * Rotates the credentials (a reload of `redis.url` with a new user name or password): every later
 * connection and reconnection of `client` and of the connections duplicated from it authenticates
 * with `url`'s. Open connections stay authenticated, as Redis keeps them when a password changes.
 * A Redis Cluster's seeds carry no credentials: nothing to do.
 */
export function useCredentials(client: RedisClient, url: string): void {
  if (client instanceof Cluster) return;
  const { username, password } = new URL(url);
  for (const c of families.get(client) ?? [client]) {
    c.options.username = decodeURIComponent(username) || undefined;
    c.options.password = decodeURIComponent(password) || undefined;
  }
}

const AUTH_REFUSED = /WRONGPASS|NOAUTH|NOPERM|invalid (username|password)/i;

/** Why Redis refuses `url`'s credentials (WRONGPASS, NOAUTH, ...), or null when it accepts them or cannot be reached to say. */
export async function credentialsRefused(url: string, timeoutMs: number): Promise<string | null> {
  const bound = Math.max(1000, timeoutMs * 20);
  // A Redis that accepts the connection and never answers must not hold the reload forever.
  const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: bound, commandTimeout: bound });
  // A refused AUTH arrives as an 'error' event; the connect() call then only says the connection closed.
  let said = '';
  probe.on('error', (err: Error) => {
    said = err.message;
  });
  try {
    await probe.connect();
    await probe.ping();
    return null;
  } catch (err) {
    const message = AUTH_REFUSED.test(said) ? said : (err as Error).message;
    return AUTH_REFUSED.test(message) ? message : null;
  } finally {
    probe.disconnect();
  }
}

/**
 * Another connection to the same Redis with a longer command timeout, for work that must not queue
 * behind the limiter's admits and may take longer than its fail-fast timeout (flushes, re-seeds).
 */
export function duplicateWithTimeout(shared: RedisClient, commandTimeout: number): RedisClient {
  const redis =
    shared instanceof Cluster
      ? shared.duplicate(undefined, { redisOptions: { ...shared.options.redisOptions, commandTimeout } })
      : shared.duplicate({ commandTimeout });
  redis.on('error', () => {});
  return redis;
}

/** Resolves once the client is ready, or after `maxMs` (callers then run in their fail mode). */
export async function whenReady(client: RedisClient, maxMs: number): Promise<void> {
  if (client.status === 'ready') return;
  await new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      client.off('ready', done);
      resolve();
    };
    const timer = setTimeout(done, maxMs);
    client.once('ready', done);
  });
}

/** How long a subscriber's commands (the connect handshake, SUBSCRIBE) may take: not the admits' fail-fast bound. */
const SUBSCRIBER_TIMEOUT_MS = 5000;

/** How long a start waits for the first subscription: after that it goes on, and the subscription follows when it takes. */
const FIRST_WAIT_MS = 1000;

/** A subscribed connection, how its first attempt went (true: subscribed), and its end. */
export interface Subscriber {
  readonly connection: Redis;
  readonly first: Promise<boolean>;
  /** Disconnects for good: no retry runs and no failure is reported after this. */
  close(): void;
}

/**
 * A connection of its own subscribed to `channels`, again on every reconnect, reconnecting with the
 * same backoff as every other connection. It subscribes itself on each connect, rather than
 * ioredis's automatic resubscribe, which leaves its promise unhandled: a SUBSCRIBE that timed out
 * or lost its connection in flight ended the process. A failed SUBSCRIBE is tried again, with a
 * backoff; `subscribed` runs after every subscription that took (whatever was published before it
 * was missed). `first` settles with the first attempt, or false at the first connection error or
 * close, or after FIRST_WAIT_MS, so a start with Redis down or unanswering does not wait for it.
 *
 * On a Redis Cluster a plain PUBLISH reaches every node, so one node serves: it subscribes to one
 * known node at a time and moves on to the next when that one fails. (ioredis's own cluster
 * subscriber reconnects the moment its node is gone, with no delay: with every node down it spun
 * a core and grew by hundreds of MiB a minute.)
 */
export function subscriberFor(
  client: RedisClient,
  seeds: readonly string[],
  channels: readonly string[],
  on: { subscribed(): void; failed(err: unknown): void },
): Subscriber {
  const own = { enableOfflineQueue: false, autoResubscribe: false, commandTimeout: SUBSCRIBER_TIMEOUT_MS };
  const sub = client instanceof Cluster ? clusterNodeSubscriber(client, seeds, own) : client.duplicate({ ...own, retryStrategy: reconnectDelay });
  let settle: ((ok: boolean) => void) | null = null;
  const first = new Promise<boolean>((resolve) => {
    const waited = setTimeout(() => settle?.(false), FIRST_WAIT_MS);
    waited.unref();
    settle = (ok) => {
      settle = null;
      clearTimeout(waited);
      resolve(ok);
    };
  });
  let closed = false;
  let retry: NodeJS.Timeout | null = null;
  let backoffMs = 0;
  const stopRetry = (): void => {
    if (retry !== null) clearTimeout(retry);
    retry = null;
  };
  const attempt = (): void => {
    stopRetry();
    if (closed) return;
    sub.subscribe(...channels).then(
      () => {
        backoffMs = 0;
        settle?.(true);
        on.subscribed();
      },
      (err: unknown) => {
        settle?.(false);
        if (closed) return;
        on.failed(err);
        // Refused (an ACL without the channel) or timed out: tried again on this connection, less
        // and less often; a reconnect meanwhile tries at once.
        backoffMs = Math.min(Math.max(backoffMs * 2, 1000), 30_000);
        if (sub.status === 'ready') {
          retry = setTimeout(attempt, backoffMs);
          retry.unref();
        }
      },
    );
  };
  sub.on('error', () => settle?.(false));
  sub.on('ready', attempt);
  // A close without an error (a server that accepts and hangs up, one at maxclients) ends the first attempt too.
  sub.on('close', () => {
    stopRetry();
    settle?.(false);
  });
  const close = (): void => {
    closed = true;
    stopRetry();
    settle?.(false);
    sub.disconnect();
  };
  return { connection: sub, first, close };
}

function clusterNodeSubscriber(client: Cluster, seeds: readonly string[], own: Record<string, unknown>): Redis {
  const known = client.nodes('all').map((n) => ({ host: n.options.host, port: n.options.port }));
  const nodes = known.length > 0 ? known : seeds.map(seedNode);
  let next = 0;
  const sub: Redis = new Redis({
    ...nodes[0],
    ...client.options.redisOptions,
    ...own,
    retryStrategy: (times) => {
      // The connector reads host and port from these options at each attempt.
      next = (next + 1) % nodes.length;
      Object.assign(sub.options, nodes[next]);
      return reconnectDelay(times);
    },
  });
  return sub;
}

/** A seed (`host:port`) as host and port. */
function seedNode(seed: string): { host: string; port: number } {
  const i = seed.lastIndexOf(':');
  return { host: seed.slice(0, i), port: Number(seed.slice(i + 1)) };
}
