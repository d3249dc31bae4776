/**
 * The Redis connection both the limiter and the tenant store use, configured to fail fast
 * (STACK.md): no offline queue, a short command timeout, no per-request retries, no
 * auto-pipelining (it halved throughput here). Reconnects keep trying in the background.
 */
import { Cluster, Redis } from 'ioredis';
import type { RawConfig } from '../config/schema.js';

/** Either client; both route a script by its first key's slot. */
export type RedisClient = Redis | Cluster;

/** Reconnect delay: quick first tries, then once a second, so recovery needs no restart. */
function reconnectDelay(times: number): number {
  return Math.min(times * 100, 1000);
}

/** Opens the configured Redis (cluster seeds win over url); null when none is configured. */
export function connectRedis(cfg: RawConfig['redis']): RedisClient | null {
  const common = {
    commandTimeout: cfg.timeoutMs,
    maxRetriesPerRequest: 0,
    enableAutoPipelining: false,
    connectTimeout: Math.max(1000, cfg.timeoutMs * 20),
  };
  let client: RedisClient;
  if (cfg.cluster.length > 0) {
    client = new Cluster(cfg.cluster, { enableOfflineQueue: false, clusterRetryStrategy: reconnectDelay, redisOptions: common });
  } else if (cfg.url) {
    client = new Redis(cfg.url, { ...common, enableOfflineQueue: false, retryStrategy: reconnectDelay });
  } else {
    return null;
  }
  // Connection errors repeat on every reconnect attempt; the limiter logs the mode change once.
  client.on('error', () => {});
  return client;
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
