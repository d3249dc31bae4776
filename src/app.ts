/**
 * The composition root: builds every adapter from the configuration, wires the pipeline, and owns
 * the lifecycle (start, stop). The only place that knows which implementation backs which seam.
 */
import type { Registry } from 'prom-client';
import type { RawConfig } from './config/schema.js';
import { compileRouteTables } from './tables.js';
import { ConfigError } from './config/load.js';
import { createTenantVerifiers } from './auth/verifiers.js';
import { createMinter } from './auth/mint.js';
import { createClientLimits } from './limits/client-limits.js';
import { LeasedLimiter } from './limits/leased.js';
import { createLimiter } from './limits/limiter.js';
import { createListeners, type BoundAddresses } from './listen/servers.js';
import { Meter } from './metering/meter.js';
import type { UsageRecorder } from './metering/recorder.js';
import { createUsageStore } from './metering/store.js';
import { processLogger, type Logger } from './observability/log.js';
import { createMetrics } from './observability/metrics.js';
import { ReloadHistory } from './observability/reloads.js';
import { compileRoutes } from './routes/match.js';
import { createPipeline, pipelineSettings } from './pipeline.js';
import { connectRedis, whenReady } from './redis/connection.js';
import { createTenantStore, type FileDiff, type TenantStore } from './tenants/store.js';
import { createClusters } from './upstream/clusters.js';
import { createBrokerPools } from './upstream/pools.js';
import { createUpstreamProxy } from './upstream/proxy.js';
import { createBrokerMaintenance } from './upstream/maintenance.js';
import { createAdminHandler } from './admin/api.js';
import { adminHostNames } from './admin/hosts.js';
import { createLiveStats } from './admin/stats.js';

export interface AppOptions {
  log?: Logger;
  clock?: () => number;
  /** Replaces metering as the pipeline's recorder (NO_USAGE switches it off); the usage API still reads the store. */
  usage?: UsageRecorder;
  /** Metering flush period; default 1000 ms. */
  usageFlushMs?: number;
  /** What `/metrics` serves; default this process's registry. A multi-worker primary passes an aggregating one. */
  metricsText?: () => Promise<string>;
  /** Without Redis, keep admin API writes (suspend, resume, records) in memory instead of refusing them (the demo). */
  memoryOverrides?: boolean;
}

export interface App {
  readonly addresses: BoundAddresses;
  readonly log: Logger;
  /** This process's metrics registry (for cluster aggregation: AggregatorRegistry.setRegistries([registry])). */
  readonly metrics: Registry;
  /** The tenant directory: `generation` and `onChange` tell when a change arrived; `reloadFile` swaps the file's tenants. */
  readonly tenants: TenantStore;
  /**
   * Applies a new configuration's tenants, plans, routes and CORS origins at once (SIGHUP); every
   * other section needs a restart and is only reported. Throws a ConfigError, changing nothing,
   * when the tables do not compile (a host listed twice, a bad route override).
   */
  reload(next: RawConfig, prepared?: FileDiff): void;
  /** Compares a new configuration's tenants with the running ones in slices, before reload() (which then skips it). */
  prepareReload(next: RawConfig): Promise<FileDiff>;
  /** The reloads tried so far; a file refused before reaching reload() (unreadable, invalid) is recorded with `refused`. */
  readonly reloads: ReloadHistory;
  /** Stops accepting, lets in-flight requests finish (up to drainMs), flushes usage, then releases everything. */
  close(drainMs?: number): Promise<void>;
}

/** Sections a reload does not apply: listeners, Redis, keys and pools are built once, at start. */
const RESTART_SECTIONS = ['server', 'log', 'limits', 'redis', 'auth', 'upstreamIdentity', 'upstream'] as const;

export async function startApp(config: RawConfig, opts: AppOptions = {}): Promise<App> {
  const log = opts.log ?? processLogger(config.log);
  const clock = opts.clock ?? Date.now;
  // The tenants are checked by the directory's own build (createTenantStore): one build, not two.
  const routeTable = compileRouteTables(config);
  // One Redis connection for the limiter and the tenant store; null = in-memory, one instance.
  const redis = connectRedis(config.redis);
  if (redis) await whenReady(redis, 2000);
  else log.info('no redis configured: limits, tenants and usage are in memory (one instance only)');
  const tenants = await createTenantStore(config, { log, ...(redis ? { redis } : {}), memoryOverrides: opts.memoryOverrides === true });
  const verifiers = createTenantVerifiers(config.auth, { log, clock });
  const minter = config.upstreamIdentity.mode === 'mint' ? await createMinter(config.upstreamIdentity.mint, { clock }) : null;
  const lp = config.server.longPoll;
  // Leasing needs the shared state; without Redis the memory limiter is already local.
  const leased = redis !== null && config.limits.mode === 'leased';
  const exactLimiter = createLimiter(config.redis, {
    log,
    clock,
    parkedSlotTtlMs: lp.maxTimeoutMs + 2 * lp.slackMs,
    ...(redis ? { redis } : {}),
    // A quota refused while other instances hold slices of it may pass once they go back: within
    // a lease, plus the sweep that returns a quiet tenant's slices.
    ...(leased ? { quotaDenialMs: 2 * config.limits.lease.durationMs } : {}),
  });
  const limiter = leased ? new LeasedLimiter(exactLimiter, redis, config.redis.keyPrefix, config.limits.lease, clock) : exactLimiter;
  const clusters = createClusters(config.upstream, { log, clock });
  const pools = createBrokerPools(config.upstream);
  const proxy = createUpstreamProxy({ clusters, pools, log });
  const usageStore = createUsageStore(redis, config.redis.keyPrefix);
  const meter = new Meter({ store: usageStore, log, clock, ...(opts.usageFlushMs ? { flushMs: opts.usageFlushMs } : {}) });
  const reloads = new ReloadHistory(clock);
  const metrics = createMetrics({
    reloads: () => reloads,
    limiterMode: () => limiter.mode(),
    brokers: () => clusters.snapshot(tenants.all()),
    usage: () => meter.lifetime(),
    flush: () => meter.stats(),
  });
  redis?.on('error', () => metrics.redisError('main'));
  verifiers.registerMetrics(metrics.registry);
  let draining = false;

  if (!config.auth.secret && !config.auth.publicKey && !config.auth.jwksUrl) {
    log.warn('no JWT key configured (auth.secret, auth.publicKey or auth.jwksUrl): every authenticated route answers 401');
  }
  if (config.auth.defaultTenant && Object.keys(config.tenants).length > 1) {
    log.warn(
      { defaultTenant: config.auth.defaultTenant },
      'auth.defaultTenant is set with several tenants: every token of the global issuer without a tenant claim acts for it (docs/tenancy.md)',
    );
  }
  if (!config.server.admin.token) log.info('no server.admin.token: admin API disabled (probes and /metrics still answer)');

  // Swapped whole by reload(); the pipeline reads it through this indirection on every request.
  let routes = compileRoutes(routeTable);
  const edge = createPipeline({
    settings: pipelineSettings(config),
    routes: { match: (method, path) => routes.match(method, path) },
    tenants,
    storageBlocked: (id) => tenants.storageBlocked(id),
    verifiers,
    limiter,
    clientLimits: createClientLimits({ failedAuth: config.auth.failedAuth, publicRoutes: config.server.publicRateLimit }),
    proxy,
    minter,
    usage: opts.usage ?? meter,
    metrics,
    log,
    clock,
  });
  const metricsText = opts.metricsText ?? (() => metrics.text());
  const admin = createAdminHandler({
    token: config.server.admin.token,
    hostNames: adminHostNames(config.server.admin.host, config.server.admin.allowedHosts),
    tenants,
    tenantRecord: async (id) => tenants.recordOf(id) ?? null,
    usage: (id, from, to) => meter.usage(id, from, to),
    brokers: () => clusters.snapshot(tenants.all()),
    maintenance: createBrokerMaintenance({ minter, timeoutMs: config.upstream.requestTimeoutMs }),
    readiness: {
      // Redis down makes an instance unready only in failMode closed: in open/local it still serves,
      // and taking every instance out of the load balancer would turn degraded into down.
      notReadyReason: () =>
        draining
          ? 'draining'
          : limiter.mode() === 'closed'
            ? 'limiter unavailable (redis down, failMode closed)'
            : anyBrokerHealthy()
              ? null
              : 'no broker reachable',
    },
    usageExport: { flush: () => meter.flush(), read: (id, from, to) => usageStore.read(id, from, to) },
    stats: createLiveStats(metricsText, { redisConfigured: redis !== null, failMode: config.redis.failMode }, clock),
    planIds: () => Object.keys(config.plans),
    metricsText,
    reloads,
    log,
    clock,
  });
  function anyBrokerHealthy(): boolean {
    for (const cluster of clusters.snapshot(tenants.all())) if (cluster.brokers.some((b) => b.healthy)) return true;
    return false;
  }
  const listeners = await createListeners(config.server, { edge, admin }, { log });

  await Promise.all([verifiers.start(), limiter.start()]);
  clusters.start(tenants.all());
  verifiers.sync(tenants.withOwnAuth());
  // Brokers and tenant keys follow the directory: removed brokers stop being probed and lose their
  // pools, and the verifiers and JWKS sets of removed or re-keyed tenants are dropped.
  // A change names what it touched: the brokers are synced only when their set changed (new
  // tenants on known brokers get their ring on first use), the verifiers from the few tenants
  // with keys of their own.
  tenants.onChange((change) => {
    if (change.brokers) proxy.sync(tenants.all());
    verifiers.sync(tenants.withOwnAuth());
  });
  meter.start();
  const addresses = await listeners.listen();
  log.info({ https: addresses.https, http: addresses.http, admin: addresses.admin }, 'queen-edge listening');

  return {
    addresses,
    log,
    metrics: metrics.registry,
    tenants,
    reloads,
    prepareReload: (next) => tenants.diffFile(next),
    reload(next, prepared) {
      let nextRoutes: typeof routes;
      try {
        // The tenants are checked by reloadFile, which places only those that changed.
        nextRoutes = compileRoutes(compileRouteTables(next));
        // Synchronous from here: no request sees new tenants with old routes, or the reverse.
        const swapped = tenants.reloadFile(next, prepared);
        if (!swapped.ok) throw new ConfigError([...swapped.problems]);
      } catch (err) {
        reloads.refused(err instanceof ConfigError ? err.problems : [String((err as Error)?.message ?? err)]);
        throw err;
      }
      routes = nextRoutes;
      // The file changed, but these tenants keep what the admin API wrote over it: say so.
      const shadowed = tenants.overridden();
      if (shadowed.length > 0)
        log.warn(
          { tenants: shadowed },
          'configuration reload: admin API overrides stay on top of the file for these tenants (queen-edge tenants reset ID drops them)',
        );
      const restart = RESTART_SECTIONS.filter((k) => JSON.stringify(next[k]) !== JSON.stringify(config[k]));
      reloads.applied(restart);
      if (restart.length > 0) log.warn({ sections: restart }, 'configuration reload: these sections changed but apply only after a restart');
      log.info({ tenants: Object.keys(next.tenants).length, plans: Object.keys(next.plans).length }, 'configuration reloaded: tenants, plans, routes and CORS');
    },
    async close(drainMs = config.server.drainTimeoutMs): Promise<void> {
      draining = true;
      await listeners.close(drainMs);
      // Exchanges that finished last may still wait for their answer's meter (a compressed answer's decoder).
      await new Promise((r) => setImmediate(r));
      await meter.close();
      verifiers.close();
      await clusters.close();
      await Promise.all([limiter.close(), pools.close(), tenants.close()]);
      if (redis) await redis.quit().catch(() => redis.disconnect());
      // The log is written asynchronously: the last lines must not be lost on exit.
      await new Promise<void>((resolve) => log.flush(() => resolve()));
    },
  };
}
