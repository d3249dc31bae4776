/**
 * The composition root: builds every adapter from the configuration, wires the pipeline, and owns
 * the lifecycle (start, stop). The only place that knows which implementation backs which seam.
 */
import type { RawConfig } from './config/schema.js';
import { compileTables } from './config/compile.js';
import { createTokenVerifier } from './auth/jwt.js';
import { createMinter } from './auth/mint.js';
import { createLimiter } from './limits/limiter.js';
import { createListeners, type BoundAddresses } from './listen/servers.js';
import { NO_USAGE, type UsageRecorder } from './metering/recorder.js';
import { createLogger, type Logger } from './observability/log.js';
import { compileRoutes } from './routes/match.js';
import { createPipeline } from './pipeline.js';
import { connectRedis, whenReady } from './limits/redis-connection.js';
import { createTenantStore } from './tenants/store.js';
import { createClusters } from './upstream/clusters.js';
import { createBrokerPools } from './upstream/pools.js';
import { adminNotFound, answerProbe } from './admin/probes.js';

export interface AppOptions {
  log?: Logger;
  clock?: () => number;
  usage?: UsageRecorder;
}

export interface App {
  readonly addresses: BoundAddresses;
  readonly log: Logger;
  /** Stops accepting, lets in-flight requests finish (up to drainMs), then releases everything. */
  close(drainMs?: number): Promise<void>;
}

export async function startApp(config: RawConfig, opts: AppOptions = {}): Promise<App> {
  const log = opts.log ?? createLogger(config.log.level);
  const clock = opts.clock ?? Date.now;
  const tables = compileTables(config);
  // One Redis connection for the limiter and the tenant store; null = in-memory, one instance.
  const redis = connectRedis(config.redis);
  if (redis) await whenReady(redis, 2000);
  else log.info('no redis configured: limits and tenants are in memory (one instance only)');
  const tenants = await createTenantStore(config, { log, ...(redis ? { redis } : {}) });
  const verifier = createTokenVerifier(config.auth, { log, clock });
  const minter = config.upstreamIdentity.mode === 'mint' ? await createMinter(config.upstreamIdentity.mint, { clock }) : null;
  const lp = config.server.longPoll;
  const limiter = createLimiter(config.redis, { log, clock, parkedSlotTtlMs: lp.maxTimeoutMs + 2 * lp.slackMs, ...(redis ? { redis } : {}) });
  const clusters = createClusters(config.upstream, { log, clock });
  const pools = createBrokerPools(config.upstream);
  let draining = false;

  if (!config.auth.secret && !config.auth.publicKey && !config.auth.jwksUrl) {
    log.warn('no JWT key configured (auth.secret, auth.publicKey or auth.jwksUrl): every authenticated route answers 401');
  }

  const edge = createPipeline({
    config,
    routes: compileRoutes(tables.routes),
    tenants,
    storageBlocked: (id) => tenants.storageBlocked(id),
    verifier,
    limiter,
    clusters,
    pools,
    minter,
    usage: opts.usage ?? NO_USAGE,
    log,
    clock,
  });
  const readiness = {
    notReadyReason: () => (draining ? 'draining' : limiter.mode() === 'closed' ? 'limiter unavailable (redis down, failMode closed)' : null),
  };
  const listeners = await createListeners(
    config.server,
    {
      edge,
      admin: (req, res) => {
        if (!answerProbe(req, res, readiness)) adminNotFound(res);
      },
    },
    { log },
  );

  await Promise.all([verifier.start(), limiter.start()]);
  clusters.start(tenants.all());
  const addresses = await listeners.listen();
  log.info({ https: addresses.https, http: addresses.http, admin: addresses.admin }, 'queen-edge listening');

  return {
    addresses,
    log,
    async close(drainMs = config.server.drainTimeoutMs): Promise<void> {
      draining = true;
      await listeners.close(drainMs);
      verifier.close();
      await clusters.close();
      await Promise.all([limiter.close(), pools.close(), tenants.close()]);
      if (redis) await redis.quit().catch(() => redis.disconnect());
    },
  };
}
