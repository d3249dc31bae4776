/**
 * The composition root: builds every adapter from the configuration, wires the pipeline, and owns
 * the lifecycle (start, stop). The only place that knows which implementation backs which seam.
 */
import type { Registry } from 'prom-client';
import type { RawConfig } from './config/schema.js';
import { compileRouteTables } from './tables.js';
import { BrokerAddresses, brokerUrlsOf } from './tenants/broker-addresses.js';
import { ConfigError } from './config/load.js';
import { inlineKeyFiles } from './auth/key-files.js';
import { createTenantVerifiers, type DomainRank } from './auth/verifiers.js';
import { createMinter } from './auth/mint.js';
import { createClientLimits } from './limits/client-limits.js';
import { LeasedLimiter } from './limits/leased.js';
import { createLimiter } from './limits/limiter.js';
import { createListeners, type BoundAddresses } from './listen/servers.js';
import { CertificateSet } from './listen/tls.js';
import { planReload, runningConfig } from './config/reload-plan.js';
import { startWarnings } from './config/warnings.js';
import { Meter } from './metering/meter.js';
import type { UsageRecorder } from './metering/recorder.js';
import { createUsageStore } from './metering/store.js';
import { processLogger, type Logger } from './observability/log.js';
import { createMetrics } from './observability/metrics.js';
import { ReloadHistory } from './observability/reloads.js';
import { compileRoutes } from './routes/match.js';
import { createPipeline, pipelineSettings } from './pipeline.js';
import { connectRedis, credentialsRefused, useCredentials, whenReady } from './redis/connection.js';
import { createTenantStore, type TenantStore } from './tenants/store.js';
import { createApiKeyStore, fileKeyRecords } from './keys/store.js';
import { ApiKeyVerifier } from './keys/verifier.js';
import { createClusters } from './upstream/clusters.js';
import { createBrokerPools } from './upstream/pools.js';
import { createUpstreamProxy } from './upstream/proxy.js';
import { createBrokerMaintenance } from './upstream/maintenance.js';
import { createAdminHandler, type AdminDeps } from './admin/api.js';
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
   * Applies a new configuration (SIGHUP): tenants, plans, routes and CORS origins at once, and the
   * other settings of config/reload-plan.ts (admin token, certificate paths, JWT keys); every other
   * changed setting is reported by its path as needing a restart. Rejects with a ConfigError,
   * changing nothing, when the tables do not compile (a host listed twice, a bad route override) or
   * a new certificate or key is unusable. Reloads run one after the other.
   */
  reload(next: RawConfig): Promise<void>;
  /** The reloads tried so far; a file refused before reaching reload() (unreadable, invalid) is recorded with `refused`. */
  readonly reloads: ReloadHistory;
  /** Stops accepting, lets in-flight requests finish (up to drainMs), flushes usage, then releases everything. */
  close(drainMs?: number): Promise<void>;
}

export async function startApp(given: RawConfig, opts: AppOptions = {}): Promise<App> {
  // A config not read by loadConfigFile (tests, embedders) may still name key files: read them now, safely.
  const config = await inlineKeyFiles(given);
  const log = opts.log ?? processLogger(config.log);
  const clock = opts.clock ?? Date.now;
  // Broker names resolved for the directory's shared-broker rule, kept for reloads and admin writes.
  const brokerAddresses = new BrokerAddresses();
  await brokerAddresses.learn(brokerUrlsOf(Object.values(config.tenants)));
  // The tenants are checked by the directory's own build (createTenantStore): one build, not two.
  const routeTable = compileRouteTables(config);
  // One Redis connection for the limiter and the tenant store; null = in-memory, one instance.
  const redis = connectRedis(config.redis);
  if (redis) await whenReady(redis, 2000);
  else log.info('no redis configured: limits, tenants and usage are in memory (one instance only)');
  const tenants = await createTenantStore(config, {
    log,
    ...(redis ? { redis } : {}),
    memoryOverrides: opts.memoryOverrides === true,
    addresses: brokerAddresses,
  });
  const verifiers = createTenantVerifiers(config.auth, { log, clock });
  const apiKeys = createApiKeyStore(redis, config.redis, log);
  const keyVerifier = new ApiKeyVerifier(apiKeys, { clock, log });
  keyVerifier.setFileKeys(fileKeyRecords(config.apiKeys));
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
  const metrics = createMetrics(
    {
      reloads: () => reloads,
      limiterMode: () => limiter.mode(),
      brokers: () => clusters.snapshot(tenants.all()),
      usage: () => meter.lifetime(),
      flush: () => meter.stats(),
      jwksFailures: () => verifiers.jwksFailures(),
      // Scraped only once the listeners below exist (the admin listener is one of them).
      certificates: () => listeners.certificates(),
    },
    undefined,
    config.metrics.tenantLabels,
  );
  redis?.on('error', () => metrics.redisError('main'));
  verifiers.registerMetrics(metrics.registry, (id) => metrics.tenantLabels.label(id));
  let draining = false;

  for (const warning of startWarnings(config)) log.warn(warning);
  if (!config.server.admin.token) log.info('no server.admin.token: admin API disabled (probes and /metrics still answer)');

  // Swapped whole by reload(); the pipeline reads it through this indirection on every request.
  let routes = compileRoutes(routeTable);
  const edge = createPipeline({
    settings: pipelineSettings(config),
    routes: { match: (method, path) => routes.match(method, path) },
    tenants,
    storageBlocked: (id) => tenants.storageBlocked(id),
    verifiers,
    apiKeys: keyVerifier,
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
  // The file last applied: the start's, then each reload's.
  let current = config;
  const adminDeps: Omit<AdminDeps, 'token'> = {
    hostNames: adminHostNames(config.server.admin.host, config.server.admin.allowedHosts),
    tenants,
    tenantRecord: async (id) => tenants.recordOf(id) ?? null,
    keys: { store: apiKeys, verifier: keyVerifier, tenant: (id) => tenants.byId(id), clock },
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
    planIds: () => Object.keys(current.plans),
    metricsText,
    reloads,
    log,
    clock,
  };
  // Rebuilt when a reload changes the token: the old one is refused from then on.
  let admin = createAdminHandler({ ...adminDeps, token: config.server.admin.token });
  function anyBrokerHealthy(): boolean {
    for (const cluster of clusters.snapshot(tenants.all())) if (cluster.brokers.some((b) => b.healthy)) return true;
    return false;
  }
  const listeners = await createListeners(config.server, { edge, admin: (req, res) => admin(req, res) }, { log });

  await Promise.all([verifiers.start(), limiter.start()]);
  clusters.start(tenants.all());
  // Who keeps a key two tenants hold: the file's tenants, then records by age, whatever was fetched first (key-claims.ts).
  const origin = (id: string): DomainRank =>
    tenants.sourceOf(id)?.record === 'file' ? { origin: 'file' } : { origin: 'record', since: tenants.authSince(id) };
  verifiers.sync(tenants.withOwnAuth(), origin);
  // Brokers and tenant keys follow the directory: removed brokers stop being probed and lose their
  // pools, and the verifiers and JWKS sets of removed or re-keyed tenants are dropped.
  // A change names what it touched: the brokers are synced only when their set changed (new
  // tenants on known brokers get their ring on first use), the verifiers from the few tenants
  // with keys of their own.
  tenants.onChange((change) => {
    if (change.brokers) proxy.sync(tenants.all());
    verifiers.sync(tenants.withOwnAuth(), origin);
  });
  meter.start();
  const addresses = await listeners.listen();
  log.info({ https: addresses.https, http: addresses.http, admin: addresses.admin }, 'queen-edge listening');

  let reloading: Promise<void> = Promise.resolve();
  /** Prepares everything that can fail (tables, certificates, keys), then swaps it all synchronously. */
  /** Records a refused reload; the error to throw. */
  function refuse(err: unknown): ConfigError {
    const problems = err instanceof ConfigError ? err.problems : [String((err as Error)?.message ?? err)];
    reloads.refused(problems);
    return err instanceof ConfigError ? err : new ConfigError(problems);
  }
  async function applyReload(given: RawConfig): Promise<void> {
    let next: RawConfig;
    try {
      // Key files named by a config not read by loadConfigFile are read now, as at start.
      next = await inlineKeyFiles(given);
    } catch (err) {
      throw refuse(err);
    }
    // Broker names resolved first (off the request path), so the shared-broker rule sees addresses.
    await brokerAddresses.learn(brokerUrlsOf(Object.values(next.tenants)));
    const plan = planReload(config, current, next);
    const running = runningConfig(config, next);
    let certs: CertificateSet | null = null;
    let commitAuth: (() => void) | null = null;
    let nextRoutes: typeof routes;
    try {
      // The tenants are checked by reloadFile, which places only those that changed.
      nextRoutes = compileRoutes(compileRouteTables(next));
      // Which tenants changed, compared in slices that yield to the event loop.
      const diff = await tenants.diffFile(next);
      if (addresses.https !== null && plan.applied.some((p) => p.startsWith('server.https.'))) {
        certs = await CertificateSet.load(running.server.https, { log });
      }
      // A PEM key file is read again at every reload: replacing the file and reloading rotates it.
      const pemFiles = next.auth.publicKey !== null || Object.values(next.tenants).some((t) => t.auth?.publicKey);
      if (pemFiles || plan.applied.some((p) => p.startsWith('auth.'))) commitAuth = await verifiers.reconfigure(next.auth);
      // New Redis credentials must work before they replace the ones that do.
      const refusedBy = redis !== null && plan.applied.includes('redis.url') ? await credentialsRefused(next.redis.url!, next.redis.timeoutMs) : null;
      if (refusedBy !== null) throw new ConfigError([`redis.url: Redis refuses the new credentials: ${refusedBy}`]);
      // Synchronous from here: no request sees new tenants with old routes, or the reverse.
      const swapped = tenants.reloadFile(next, diff);
      if (!swapped.ok) throw new ConfigError([...swapped.problems]);
    } catch (err) {
      certs?.close();
      throw refuse(err);
    }
    routes = nextRoutes;
    keyVerifier.setFileKeys(fileKeyRecords(next.apiKeys));
    commitAuth?.();
    verifiers.sync(tenants.withOwnAuth(), origin);
    if (certs !== null) listeners.replaceCertificates(certs);
    if (redis !== null && plan.applied.includes('redis.url')) useCredentials(redis, next.redis.url!);
    if (next.server.admin.token !== current.server.admin.token) admin = createAdminHandler({ ...adminDeps, token: next.server.admin.token });
    current = next;
    // The file changed, but these tenants keep what the admin API wrote over it: say so.
    const shadowed = tenants.overridden();
    if (shadowed.length > 0)
      log.warn(
        { tenants: shadowed },
        'configuration reload: admin API overrides stay on top of the file for these tenants (queen-edge tenants reset ID drops them)',
      );
    reloads.applied(plan);
    if (plan.restartNeeded.length > 0)
      log.warn({ settings: plan.restartNeeded }, 'configuration reload: these settings changed but apply only after a restart');
    log.info(
      { tenants: Object.keys(next.tenants).length, plans: Object.keys(next.plans).length, settings: plan.applied },
      'configuration reloaded: tenants, plans, routes, CORS and the settings listed',
    );
  }

  return {
    addresses,
    log,
    metrics: metrics.registry,
    tenants,
    reloads,
    reload(next) {
      const run = reloading.then(() => applyReload(next));
      reloading = run.catch(() => {});
      return run;
    },
    async close(drainMs = config.server.drainTimeoutMs): Promise<void> {
      draining = true;
      await listeners.close(drainMs);
      // Exchanges that finished last may still wait for their answer's meter (a compressed answer's decoder).
      await new Promise((r) => setImmediate(r));
      await meter.close();
      verifiers.close();
      await clusters.close();
      await Promise.all([limiter.close(), pools.close(), tenants.close(), apiKeys.close()]);
      if (redis) await redis.quit().catch(() => redis.disconnect());
      // The log is written asynchronously: the last lines must not be lost on exit.
      await new Promise<void>((resolve) => log.flush(() => resolve()));
    },
  };
}
