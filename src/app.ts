/**
 * The composition root: builds every adapter from the configuration, wires the pipeline, and owns
 * the lifecycle (start, stop). The only place that knows which implementation backs which seam.
 */
import type { Registry } from 'prom-client';
import type { RawConfig } from './config/schema.js';
import { compileRouteTables } from './tables.js';
import { tenantIds } from './config/tenant-ids.js';
import { BrokerAddresses, brokerUrlsOf } from './tenants/broker-addresses.js';
import { ConfigError } from './config/load.js';
import { inlineKeyFiles } from './auth/key-files.js';
import { createTenantVerifiers, type DomainRank, type TenantVerifiers } from './auth/verifiers.js';
import { createMinter, type UpstreamMinter } from './auth/mint.js';
import { createClientLimits } from './limits/client-limits.js';
import { LeasedLimiter } from './limits/leased.js';
import { createLimiter, type EdgeLimiter } from './limits/limiter.js';
import { createListeners, type BoundAddresses, type H1Handler, type Listeners, type RequestHandler } from './listen/servers.js';
import { CertificateSet } from './listen/tls.js';
import { planReload, runningConfig, type ReloadPlan } from './config/reload-plan.js';
import { startWarnings } from './config/warnings.js';
import { Meter } from './metering/meter.js';
import type { UsageRecorder } from './metering/recorder.js';
import { createUsageStore, type UsageStore } from './metering/store.js';
import { MonthCounterReseeder } from './metering/reseed.js';
import { RedisEpoch } from './redis/epoch.js';
import { processLogger, type Logger } from './observability/log.js';
import { createMetrics, type EdgeMetrics } from './observability/metrics.js';
import { tracingSettings } from './observability/tracing-settings.js';
import type { Tracing } from './observability/tracing.js';
import { ReloadHistory } from './observability/reloads.js';
import { compileRoutes, type RouteMatcher } from './routes/match.js';
import type { RouteSpec } from './routes/table.js';
import { createPipeline, pipelineSettings } from './pipeline.js';
import { connectRedis, credentialsRefused, useCredentials, whenReady, type RedisClient } from './redis/connection.js';
import { createTenantStore, type FileDiff, type StoreBacking, type TenantStore } from './tenants/store.js';
import { openStore, type Store } from './store/connection.js';
import { ChangeFeed, latestChange } from './store/changes.js';
import { ChangePokes } from './store/pokes.js';
import { directoryKeys } from './redis/keys.js';
import { createApiKeyStore, fileKeyRecords, type ApiKeyStore } from './keys/store.js';
import { openStoreKeys } from './keys/store-keys.js';
import { ApiKeyVerifier } from './keys/verifier.js';
import { TenantKeyLifetimes } from './keys/lifetime.js';
import { createClusters, type Clusters } from './upstream/clusters.js';
import { createBrokerPools, type BrokerPools } from './upstream/pools.js';
import { createUpstreamProxy, type UpstreamProxy } from './upstream/proxy.js';
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

/** Everything built from the configuration at start; reload() changes what they hold, never which they are. */
interface Parts {
  /** The file the process started with (after inlineKeyFiles): what reloads compare against to tell restart-only settings. */
  readonly config: RawConfig;
  readonly log: Logger;
  readonly clock: () => number;
  /** Broker names resolved for the directory's shared-broker rule, kept for reloads and admin writes. */
  readonly brokerAddresses: BrokerAddresses;
  readonly routeTable: readonly RouteSpec[];
  /** One Redis connection for the limiter and the tenant store; null = in-memory, one instance. */
  readonly redis: RedisClient | null;
  /** The durable store (store.url) and the process's one change feed over it; null without a store. */
  readonly durable: Durable | null;
  readonly tenants: TenantStore;
  readonly verifiers: TenantVerifiers;
  readonly apiKeys: ApiKeyStore;
  readonly keyVerifier: ApiKeyVerifier;
  /** Revokes the keys of tenants that leave the directory. */
  readonly keyLifetimes: TenantKeyLifetimes;
  readonly minter: UpstreamMinter | null;
  readonly limiter: EdgeLimiter;
  readonly clusters: Clusters;
  readonly pools: BrokerPools;
  readonly proxy: UpstreamProxy;
  readonly usageStore: UsageStore;
  readonly meter: Meter;
  /** Tells when Redis came back empty (null without Redis); the reseeder, with a store, rebuilds the month counters. */
  readonly epoch: RedisEpoch | null;
  readonly reseeder: MonthCounterReseeder | null;
  readonly reloads: ReloadHistory;
  readonly metrics: EdgeMetrics;
  readonly tracing: Tracing | null;
}

/**
 * The durable store's parts: the pool, the one change feed every record kind subscribes to (tenants
 * and plans here; keys: `key:`), the pokes that make peers read it now, and where the feed starts.
 */
interface Durable extends StoreBacking {
  readonly pokes: ChangePokes;
  /** The log's position before any initial read: changes after it are handed over again (reads are idempotent). */
  readonly fromSeq: number;
}

/** What changes at run time, read by the admin handler's readiness and plan ids. */
interface LiveState {
  /** Swapped whole by reload(); the pipeline reads it through this indirection on every request. */
  routes: RouteMatcher;
  /** Set by close(): the readiness probe answers "draining". */
  draining: boolean;
  /** The file last applied: the start's, then each reload's. */
  current: RawConfig;
  /** The last reload, settled: reloads run one after the other. */
  reloading: Promise<void>;
}

/** The run-time state, and the admin handler over it. */
interface Live extends LiveState {
  readonly adminDeps: Omit<AdminDeps, 'token'>;
  /** Rebuilt when a reload changes the token: the old one is refused from then on. */
  admin: H1Handler;
}

/** The listeners once bound: a reload may replace their certificates. */
interface Served {
  readonly listeners: Listeners;
  readonly addresses: BoundAddresses;
}

/** What a reload prepared before its synchronous swap. */
interface Staged {
  readonly routes: RouteMatcher;
  readonly diff: FileDiff;
  readonly certs: CertificateSet | null;
  readonly commitAuth: (() => void) | null;
}

export async function startApp(given: RawConfig, opts: AppOptions = {}): Promise<App> {
  // A config not read by loadConfigFile (tests, embedders) may still name key files: read them now, safely.
  const config = await inlineKeyFiles(given);
  // The certificates are scraped only once the listeners below exist (the admin listener is one of them).
  const p = await buildParts(config, opts, () => listeners.certificates());
  warnAboutConfig(config, p.log);
  const live = startLive(p, opts.metricsText ?? (() => p.metrics.text()));
  const edge = buildEdge(p, live, opts);
  const listeners = await createListeners(config.server, { edge, admin: (req, res) => live.admin(req, res) }, { log: p.log });
  await startParts(p);
  const addresses = await listeners.listen();
  p.log.info({ https: addresses.https, http: addresses.http, admin: addresses.admin }, 'queen-edge listening');
  const served: Served = { listeners, addresses };

  return {
    addresses,
    log: p.log,
    metrics: p.metrics.registry,
    tenants: p.tenants,
    reloads: p.reloads,
    reload(next) {
      const run = live.reloading.then(() => reloadApp(p, live, served, next));
      live.reloading = run.catch(() => {});
      return run;
    },
    async close(drainMs = config.server.drainTimeoutMs): Promise<void> {
      live.draining = true;
      await listeners.close(drainMs);
      await closeParts(p);
    },
  };
}

/** Every adapter, from the configuration: the directory, verifiers and keys, limiter, upstream, metering, metrics. */
async function buildParts(config: RawConfig, opts: AppOptions, certificates: Listeners['certificates']): Promise<Parts> {
  const base = await buildDirectory(config, opts);
  const { log, clock, redis } = base;
  const verifiers = createTenantVerifiers(config.auth, { log, clock });
  const { durable } = base;
  const apiKeys = durable ? await openStoreKeys(durable.store, durable.feed, redis, config.redis, log) : createApiKeyStore(redis, config.redis, log);
  const keyVerifier = new ApiKeyVerifier(apiKeys, { clock, log });
  keyVerifier.setFileKeys(fileKeyRecords(config.apiKeys));
  const keyLifetimes = new TenantKeyLifetimes(apiKeys, keyVerifier, { log, clock });
  const minter = config.upstreamIdentity.mode === 'mint' ? await createMinter(config.upstreamIdentity.mint, { clock }) : null;
  const limiter = buildLimiter(config, redis, log, clock);
  const clusters = createClusters(config.upstream, { log, clock });
  const pools = createBrokerPools(config.upstream);
  const proxy = createUpstreamProxy({ clusters, pools, log });
  const store = durable?.store ?? null;
  const usageStore = createUsageStore(redis, config.redis.keyPrefix, store);
  const meter = new Meter({
    store: usageStore,
    log,
    clock,
    maxEntries: config.store.usageBufferEntries,
    ...(opts.usageFlushMs ? { flushMs: opts.usageFlushMs } : {}),
  });
  const { epoch, reseeder } = buildEpoch(config, redis, store, meter, limiter, log, clock);
  const reloads = new ReloadHistory(clock);
  const tracingOn = tracingSettings(config.tracing);
  // Loaded only when on: an edge without tracing carries none of the SDK.
  const tracing = tracingOn === null ? null : new (await import('./observability/tracing.js')).Tracing(tracingOn, log);
  const parts = {
    ...base,
    durable,
    verifiers,
    apiKeys,
    keyVerifier,
    keyLifetimes,
    minter,
    limiter,
    clusters,
    pools,
    proxy,
    usageStore,
    meter,
    epoch,
    reseeder,
    reloads,
    tracing,
  };
  return { ...parts, metrics: buildMetrics(parts, certificates) };
}

/** The log and clock, the route table, Redis, and the tenant directory over it. */
async function buildDirectory(
  config: RawConfig,
  opts: AppOptions,
): Promise<Pick<Parts, 'config' | 'log' | 'clock' | 'brokerAddresses' | 'routeTable' | 'redis' | 'durable' | 'tenants'>> {
  const log = opts.log ?? processLogger(config.log);
  const clock = opts.clock ?? Date.now;
  const brokerAddresses = new BrokerAddresses();
  await brokerAddresses.learn(brokerUrlsOf(Object.values(config.tenants)));
  // The tenants are checked by the directory's own build (createTenantStore): one build, not two.
  const routeTable = compileRouteTables(config);
  const redis = connectRedis(config.redis);
  if (redis) await whenReady(redis, 2000);
  else log.info('no redis configured: limits, tenants and usage are in memory (one instance only)');
  const durable = await openDurable(config, redis, log);
  const tenants = await createTenantStore(config, {
    log,
    ...(redis ? { redis } : {}),
    ...(durable ? { store: durable } : {}),
    memoryOverrides: opts.memoryOverrides === true,
    addresses: brokerAddresses,
  });
  return { config, log, clock, brokerAddresses, routeTable, redis, durable, tenants };
}

/**
 * Opens the store when store.url is set, and its change feed. An edge with a store reads its
 * records from it at start, so a store that cannot be reached fails the start (docs/store.md).
 */
async function openDurable(config: RawConfig, redis: RedisClient | null, log: Logger): Promise<Durable | null> {
  let store: Store | null;
  let fromSeq = 0;
  try {
    store = await openStore(config.store.url ? { url: config.store.url, schema: config.store.schema, timeoutMs: config.store.timeoutMs } : null, log);
    if (store) fromSeq = await latestChange(store);
  } catch (err) {
    throw new StoreStartError(err);
  }
  if (!store) return null;
  const feed = new ChangeFeed(store, log);
  const pokes = new ChangePokes(redis, directoryKeys(config.redis.keyPrefix).changes, feed, log);
  return { store, feed, pokes, fromSeq, announce: (seq, subject) => pokes.announce(seq, subject) };
}

/** The start failed: store.url is set but the store could not be read (the CLI prints the message alone). */
export class StoreStartError extends Error {
  constructor(cause: unknown) {
    super(
      `store.url is set but the durable store could not be opened (${(cause as Error)?.message ?? String(cause)}): an edge with a store reads its records from it at start; start PostgreSQL or correct store.url (docs/store.md)`,
      { cause },
    );
    this.name = 'StoreStartError';
  }
}

/** Redis's epoch, followed by the month counters' re-seed when there is a ledger to re-seed from. */
function buildEpoch(
  config: RawConfig,
  redis: RedisClient | null,
  store: Store | null,
  meter: Meter,
  limiter: EdgeLimiter,
  log: Logger,
  clock: () => number,
): Pick<Parts, 'epoch' | 'reseeder'> {
  if (!redis) return { epoch: null, reseeder: null };
  const epoch = new RedisEpoch(redis, config.redis.keyPrefix, log);
  if (!store) return { epoch, reseeder: null };
  const reseeder = new MonthCounterReseeder({
    redis,
    prefix: config.redis.keyPrefix,
    store,
    flush: () => meter.flush(),
    limiterOnRedis: () => limiter.mode() === 'redis',
    log,
    clock,
  });
  epoch.onChange(reseeder.follow);
  return { epoch, reseeder };
}

/** The exact limiter, or the leased one over it (limits.mode: leased, with Redis). */
function buildLimiter(config: RawConfig, redis: RedisClient | null, log: Logger, clock: () => number): EdgeLimiter {
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
  return leased ? new LeasedLimiter(exactLimiter, redis, config.redis.keyPrefix, config.limits.lease, clock) : exactLimiter;
}

/** The process's metrics, read from the parts at scrape time; Redis errors and token checks counted too. */
function buildMetrics(p: Omit<Parts, 'metrics'>, certificates: Listeners['certificates']): EdgeMetrics {
  const { reloads, limiter, clusters, meter, verifiers, apiKeys } = p;
  const metrics = createMetrics(
    {
      reloads: () => reloads,
      limiterMode: () => limiter.mode(),
      brokers: () => [{ brokers: clusters.brokers() }],
      usage: () => meter.lifetime(),
      flush: () => meter.stats(),
      redisEpoch: () => ({ emptied: p.epoch?.emptied ?? 0, reseededTenants: p.reseeder?.reseededTenants ?? 0 }),
      jwksFailures: () => verifiers.jwksFailures(),
      keyRevocationsCheckedAt: () => apiKeys.checkedAt,
      storeUp: () => p.durable?.store.available ?? null,
      certificates,
    },
    undefined,
    p.config.metrics.tenantLabels,
  );
  p.redis?.on('error', () => metrics.redisError('main'));
  verifiers.registerMetrics(metrics.registry, (id) => metrics.tenantLabels.label(id));
  p.tracing?.registerMetrics(metrics.registry);
  return metrics;
}

/** Settings that start but are likely mistakes, and a disabled admin API. */
function warnAboutConfig(config: RawConfig, log: Logger): void {
  for (const warning of startWarnings(config)) log.warn(warning);
  if (!config.server.admin.token) log.info('no server.admin.token: admin API disabled (probes and /metrics still answer)');
}

/** The run-time state at start, and the admin handler with the start's token. */
function startLive(p: Parts, metricsText: () => Promise<string>): Live {
  const state: LiveState = { routes: compileRoutes(p.routeTable), draining: false, current: p.config, reloading: Promise.resolve() };
  const adminDeps = buildAdminDeps(p, state, metricsText);
  // The same object, not a copy: the admin deps read its drain flag and current file.
  return Object.assign(state, { adminDeps, admin: createAdminHandler({ ...adminDeps, token: p.config.server.admin.token }) });
}

/** The request pipeline over the parts. */
function buildEdge(p: Parts, live: LiveState, opts: AppOptions): RequestHandler {
  const { config, tenants } = p;
  return createPipeline({
    settings: pipelineSettings(config),
    routes: { match: (method, path) => live.routes.match(method, path) },
    tenants,
    storageBlocked: (id) => tenants.storageBlocked(id),
    verifiers: p.verifiers,
    apiKeys: p.keyVerifier,
    limiter: p.limiter,
    clientLimits: createClientLimits({ failedAuth: config.auth.failedAuth, publicRoutes: config.server.publicRateLimit }),
    proxy: p.proxy,
    minter: p.minter,
    usage: opts.usage ?? p.meter,
    metrics: p.metrics,
    log: p.log,
    clock: p.clock,
    tracing: p.tracing,
  });
}

/** What the admin handler serves from, but its token (a reload may change that alone). */
function buildAdminDeps(p: Parts, live: LiveState, metricsText: () => Promise<string>): Omit<AdminDeps, 'token'> {
  const { config, tenants, meter, clusters, clock } = p;
  return {
    hostNames: adminHostNames(config.server.admin.host, config.server.admin.allowedHosts),
    tenants,
    tenantRecord: async (id) => tenants.recordOf(id) ?? null,
    keys: { store: p.apiKeys, verifier: p.keyVerifier, tenant: (id) => tenants.byId(id), clock },
    usage: (id, from, to) => meter.usage(id, from, to),
    brokers: (page) => clusters.snapshot(page),
    maintenance: createBrokerMaintenance({ minter: p.minter, timeoutMs: config.upstream.requestTimeoutMs }),
    readiness: {
      notReadyReason: () => notReadyReason(p, live),
      degraded: () => (p.durable && !p.durable.store.available ? [STORE_DEGRADED] : []),
    },
    usageExport: { flush: () => meter.flush(), read: (id, from, to) => p.usageStore.read(id, from, to) },
    stats: createLiveStats(metricsText, { redisConfigured: p.redis !== null, failMode: config.redis.failMode }, clock),
    planIds: () => Object.keys(live.current.plans),
    metricsText,
    reloads: p.reloads,
    log: p.log,
    clock,
  };
}

/** What /readyz says while the store is away. */
const STORE_DEGRADED = 'store unavailable: serving from memory, admin writes refused (503 store_unavailable)';

/**
 * Why this instance is not ready, or null. Redis down makes an instance unready only in failMode
 * closed: in open/local it still serves, and taking every instance out of the load balancer would
 * turn degraded into down.
 */
function notReadyReason(p: Parts, live: LiveState): string | null {
  if (live.draining) return 'draining';
  if (p.limiter.mode() === 'closed') return 'limiter unavailable (redis down, failMode closed)';
  // The tracked brokers are those the tenants list: no pass over the tenants per probe.
  return p.clusters.brokers().some((b) => b.healthy) ? null : 'no broker reachable';
}

/** Starts the parts' timers and connections, and makes brokers and tenant keys follow the directory. */
async function startParts(p: Parts): Promise<void> {
  const { tenants } = p;
  await Promise.all([p.verifiers.start(), p.limiter.start(), p.epoch?.start()]);
  p.clusters.start(tenants.all());
  syncVerifiers(p);
  if (p.durable) {
    // The feed first: a poke read from an unset position would hand over the whole log again.
    p.durable.feed.start(p.durable.fromSeq);
    await p.durable.pokes.start(p.config.redis.cluster);
  }
  // Brokers and tenant keys follow the directory: new brokers are probed, removed ones stop being
  // probed and lose their pools, and the verifiers and JWKS sets of removed or re-keyed tenants
  // are dropped. A change names what it touched: the broker URLs that came or went (new tenants
  // get their ring on first use), the verifiers from the few tenants with keys of their own.
  // A tenant gone from the directory takes its API keys with it.
  tenants.onChange((change) => {
    if (change.brokers) p.proxy.follow(change.brokers);
    syncVerifiers(p);
    p.keyLifetimes.removed([...change.tenants].filter((id) => tenants.byId(id) === undefined));
  });
  p.meter.start();
}

/** The verifiers follow the tenants with keys of their own, each ranked by `origin`. */
function syncVerifiers(p: Parts): void {
  p.verifiers.sync(p.tenants.withOwnAuth(), (id) => origin(p.tenants, id));
}

/** Who keeps a key two tenants hold: the file's tenants, then records by age, whatever was fetched first (key-claims.ts). */
function origin(tenants: TenantStore, id: string): DomainRank {
  return tenants.sourceOf(id)?.record === 'file' ? { origin: 'file' } : { origin: 'record', since: tenants.authSince(id) };
}

/** App.reload(): prepares everything that can fail (tables, certificates, keys), then swaps it all synchronously. */
async function reloadApp(p: Parts, live: Live, served: Served, given: RawConfig): Promise<void> {
  let next: RawConfig;
  try {
    // Key files named by a config not read by loadConfigFile are read now, as at start.
    next = await inlineKeyFiles(given);
  } catch (err) {
    throw refuse(p.reloads, err);
  }
  const plan = planReload(p.config, live.current, next);
  const staged = await stageReload(p, served, next, plan);
  swapReload(p, live, served, next, plan, staged);
  // The directory compared the tenants (planReload leaves them to it).
  reportReload(p, next, staged.diff.changed.length > 0 ? { ...plan, applied: [...plan.applied, 'tenants'] } : plan);
}

/** Everything a reload needs that can fail, before anything changes; refused (and recorded) as a whole. */
async function stageReload(p: Parts, served: Served, next: RawConfig, plan: ReloadPlan): Promise<Staged> {
  const running = runningConfig(p.config, next);
  let certs: CertificateSet | null = null;
  try {
    // The tenants are checked by reloadFile, which places only those that changed.
    const routes = compileRoutes(compileRouteTables(next));
    // Which tenants changed, compared in slices that yield to the event loop.
    const diff = await p.tenants.diffFile(next);
    // Their broker names resolved (off the request path), so the shared-broker rule sees addresses.
    await p.brokerAddresses.learn(brokerUrlsOf(diff.changed.map((id) => next.tenants[id])));
    // A changed plan rebuilds every tenant: in slices now, not in the synchronous swap.
    const prepared = await p.tenants.prepareFile(next, diff);
    if (served.addresses.https !== null && plan.applied.some((s) => s.startsWith('server.https.'))) {
      certs = await CertificateSet.load(running.server.https, { log: p.log });
    }
    // Key files were read again (inlineKeyFiles): a replaced file is a changed auth.publicKey, a
    // tenant's a changed tenant, whose verifier the directory's sync rebuilds.
    const commitAuth = plan.applied.some((s) => s.startsWith('auth.')) ? await p.verifiers.reconfigure(next.auth) : null;
    // New Redis credentials must work before they replace the ones that do.
    const refusedBy = p.redis !== null && plan.applied.includes('redis.url') ? await credentialsRefused(next.redis.url!, next.redis.timeoutMs) : null;
    if (refusedBy !== null) throw new ConfigError([`redis.url: Redis refuses the new credentials: ${refusedBy}`]);
    return { routes, diff: prepared, certs, commitAuth };
  } catch (err) {
    certs?.close();
    throw refuse(p.reloads, err);
  }
}

/** Synchronous: no request sees new tenants with old routes, or the reverse. */
function swapReload(p: Parts, live: Live, served: Served, next: RawConfig, plan: ReloadPlan, staged: Staged): void {
  try {
    const swapped = p.tenants.reloadFile(next, staged.diff);
    if (!swapped.ok) throw new ConfigError([...swapped.problems]);
  } catch (err) {
    staged.certs?.close();
    throw refuse(p.reloads, err);
  }
  live.routes = staged.routes;
  p.keyVerifier.setFileKeys(fileKeyRecords(next.apiKeys));
  staged.commitAuth?.();
  syncVerifiers(p);
  if (staged.certs !== null) served.listeners.replaceCertificates(staged.certs);
  if (p.redis !== null && plan.applied.includes('redis.url')) useCredentials(p.redis, next.redis.url!);
  if (next.server.admin.token !== live.current.server.admin.token) live.admin = createAdminHandler({ ...live.adminDeps, token: next.server.admin.token });
  live.current = next;
}

/** Records an applied reload and logs what it changed, what it could not, and what admin writes still shadow. */
function reportReload(p: Parts, next: RawConfig, plan: ReloadPlan): void {
  const { log } = p;
  // The file changed, but these tenants keep what the admin API wrote over it: say so.
  const shadowed = p.tenants.overridden();
  if (shadowed.length > 0)
    log.warn(
      { tenants: shadowed },
      'configuration reload: admin API overrides stay on top of the file for these tenants (queen-edge tenants reset ID drops them)',
    );
  p.reloads.applied(plan);
  if (plan.restartNeeded.length > 0) log.warn({ settings: plan.restartNeeded }, 'configuration reload: these settings changed but apply only after a restart');
  log.info(
    { tenants: tenantIds(next.tenants).length, plans: Object.keys(next.plans).length, settings: plan.applied },
    'configuration reloaded: tenants, plans, routes, CORS and the settings listed',
  );
}

/** Records a refused reload; the error to throw. */
function refuse(reloads: ReloadHistory, err: unknown): ConfigError {
  const problems = err instanceof ConfigError ? err.problems : [String((err as Error)?.message ?? err)];
  reloads.refused(problems);
  return err instanceof ConfigError ? err : new ConfigError(problems);
}

/** After the listeners drained: flushes usage, then releases everything in order. */
async function closeParts(p: Parts): Promise<void> {
  // Exchanges that finished last may still wait for their answer's meter (a compressed answer's decoder).
  await new Promise((r) => setImmediate(r));
  await p.meter.close();
  p.epoch?.close();
  p.reseeder?.close();
  p.verifiers.close();
  p.keyLifetimes.close();
  await p.clusters.close();
  p.durable?.pokes.close();
  await p.durable?.feed.stop();
  await Promise.all([p.limiter.close(), p.pools.close(), p.tenants.close(), p.apiKeys.close(), p.tracing?.close()]);
  await p.durable?.store.close();
  const redis = p.redis;
  if (redis) await redis.quit().catch(() => redis.disconnect());
  // The log is written asynchronously: the last lines must not be lost on exit.
  await new Promise<void>((resolve) => p.log.flush(() => resolve()));
}
