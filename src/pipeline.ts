/**
 * The request path, in the order of DESIGN §1: host tenant, CORS, route, authenticate, token
 * tenant, authorize, gates, body, limits, pick a broker, forward, respond. Each step either yields
 * a value for the next or a refusal (an EdgeError), and the first refusal ends the request.
 * Decisions live in their modules; this file only sequences them and writes the response.
 */
import { randomUUID } from 'node:crypto';
import { isAllowed } from './auth/access.js';
import { extractToken, type Identity, type TokenVerifier } from './auth/jwt.js';
import type { UpstreamMinter } from './auth/mint.js';
import type { RawConfig } from './config/schema.js';
import { actualResponseHeaders, preflightVerdict } from './cors/policy.js';
import { edgeError, isEdgeError, renderError, type EdgeError, type ErrorCode } from './errors.js';
import { clientKey, type ClientLimits } from './limits/client-limits.js';
import type { Limiter } from './limits/limiter.js';
import type { EdgeRequest, EdgeResponse, RequestHandler } from './listen/servers.js';
import type { UsageRecorder } from './metering/recorder.js';
import type { Logger } from './observability/log.js';
import type { LimitOutcome, RequestMetrics } from './observability/metrics.js';
import type { RouteMatcher } from './routes/match.js';
import { normalizeTarget } from './routes/match.js';
import type { RouteSpec } from './routes/table.js';
import { ackFacts, pushFacts, readBody, transactionFacts, type BodyFacts } from './stages/body.js';
import { parsePopQuery, type PopQuery } from './stages/pop-query.js';
import { acceptableRequestId, upstreamHeaders } from './stages/upstream-headers.js';
import type { Tenant, TenantDirectory } from './tenants/model.js';
import type { Clusters } from './upstream/clusters.js';
import { clientGone, failureError, forwardOnce, type ForwardResult } from './upstream/forward.js';
import { popNamespaceLaneKey, popQueueLaneKey, pushLaneKey } from './upstream/lane-key.js';
import type { BrokerPools } from './upstream/pools.js';

/** Everything the pipeline talks to; app.ts builds it. */
export interface PipelineDeps {
  readonly config: RawConfig;
  readonly routes: RouteMatcher;
  readonly tenants: TenantDirectory;
  /** Storage gate (DESIGN §5): true while the tenant is over its plan's storage. */
  readonly storageBlocked: (tenantId: string) => boolean;
  readonly verifier: TokenVerifier;
  readonly limiter: Limiter;
  /** Per-client-IP limits on failed authentication and anonymous routes. */
  readonly clientLimits: ClientLimits;
  readonly clusters: Clusters;
  readonly pools: BrokerPools;
  readonly minter: UpstreamMinter | null;
  readonly usage: UsageRecorder;
  readonly metrics: RequestMetrics;
  readonly log: Logger;
  readonly clock: () => number;
}

/** Per-request state, every field present from the start (one stable shape). */
class RequestContext {
  tenant: Tenant | null = null;
  route: RouteSpec | null = null;
  identity: Identity | null = null;
  broker: string | null = null;
  status = 0;
  code: ErrorCode | null = null;
  bytesIn = 0;
  bytesOut = 0;
  /** Stopwatch start for the latency histograms (performance.now(): monotonic, sub-millisecond). */
  readonly startedAt = performance.now();
  /** Time spent in forwardOnce (dispatch to last relayed byte), ms. */
  upstreamMs = 0;
  /** The limiter's decision; null when it was not consulted. */
  limit: LimitOutcome = null;
  /** Push items of the request body (metering counts a transaction's from here). */
  requestMessages = 0;
  /** Metering waits until the relayed body is parsed (settleUsage), as well as for finish. */
  awaitBody = false;
  /** The parsed relayed body, for metering. */
  response: unknown = undefined;
  recorded = false;
  done = false;
  /** Headers the edge adds to whatever answer goes out (X-Request-Id, CORS, RateLimit). */
  headers: Record<string, string>;
  constructor(
    readonly id: string,
    readonly startMs: number,
  ) {
    this.headers = { 'x-request-id': id };
  }
}

const ONE_OF = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? undefined : v);

export function createPipeline(d: PipelineDeps): RequestHandler {
  const { config, log } = d;
  const lp = config.server.longPoll;
  const upstreamCfg = config.upstream;
  const identityMode = config.upstreamIdentity.mode;
  const accessLog = config.log.accessLog;
  const defaultTenantId = config.auth.defaultTenant;
  const tenantClaimName = config.auth.tenantClaim;

  return (req, res) => {
    handle(req, res).catch((err: unknown) => {
      // A bug, never a client's doing: answer 502 if still possible, keep the process alive.
      log.error({ err }, 'pipeline failure');
      if (!res.headersSent && !clientGone(res)) send(res, null, edgeError('bad_gateway', 'internal error'));
      else res.destroy();
    });
  };

  async function handle(req: EdgeRequest, res: EdgeResponse): Promise<void> {
    const ctx = new RequestContext(acceptableRequestId(req.headers['x-request-id']) ?? randomUUID(), d.clock());
    res.once('finish', () => finish(req, ctx));
    res.once('close', () => finish(req, ctx));

    // Node keeps the first of duplicated Host/Authorization headers; an edge must not guess which
    // one a broker or an intermediary would read, so such requests are refused outright.
    const dup = duplicatedSingleton(req.rawHeaders);
    if (dup !== null) return refuse(res, ctx, dup === 'authorization' ? edgeError('unauthorized', 'more than one Authorization header') : edgeError('invalid_request', `more than one ${dup} header`));

    // 1. Tenant by host.
    const host = hostOf(req);
    const hostTenant = host === '' ? undefined : d.tenants.byHost(host);

    // 2. CORS, before authentication: preflights carry no token.
    const origin = ONE_OF(req.headers.origin);
    if (origin !== undefined) {
      const policy = (hostTenant ?? (defaultTenantId ? d.tenants.byId(defaultTenantId) : undefined))?.cors;
      const preflightMethod = ONE_OF(req.headers['access-control-request-method']);
      if (req.method === 'OPTIONS' && preflightMethod !== undefined) {
        const verdict = policy ? preflightVerdict(policy, origin, preflightMethod, ONE_OF(req.headers['access-control-request-headers'])) : null;
        if (!verdict?.allowed) return refuse(res, ctx, edgeError('forbidden', 'origin not allowed'));
        ctx.status = 204;
        res.writeHead(204, { ...verdict.headers, 'x-request-id': ctx.id });
        res.end();
        return;
      }
      if (!policy?.allows(origin)) return refuse(res, ctx, edgeError('forbidden', 'origin not allowed'));
      Object.assign(ctx.headers, actualResponseHeaders(origin));
    }

    // 3. Route: normalised once; unknown, operator-only and blocked routes are never forwarded.
    const target = normalizeTarget(req.url ?? '/');
    if (isEdgeError(target)) return refuse(res, ctx, target);
    const match = d.routes.match(req.method ?? 'GET', target.path);
    if (!match || match.route.exposure !== 'tenant') return refuse(res, ctx, edgeError('route_not_found'));
    const route = (ctx.route = match.route);

    // 4-6. Authenticate, then the tenant from the token (and the host).
    let tenant: Tenant | undefined;
    if (route.access === 'public') {
      tenant = hostTenant ?? (defaultTenantId ? d.tenants.byId(defaultTenantId) : undefined);
      if (!tenant) return refuse(res, ctx, edgeError('route_not_found'));
      return answerPublic(req, res, ctx, tenant);
    } else {
      const token = extractToken(req.headers.authorization);
      if (token === undefined) return refuse(res, ctx, edgeError('unauthorized', 'missing bearer token'));
      if (isEdgeError(token)) return refuse(res, ctx, token);
      const verified = d.verifier.cached(token) ?? (await verifyThrottled(req, token));
      if (isEdgeError(verified)) return refuse(res, ctx, verified);
      ctx.identity = verified;
      const claimed = verified.tenant;
      if (claimed !== null) {
        if (hostTenant && hostTenant.id !== claimed) return refuse(res, ctx, edgeError('forbidden', 'token tenant does not match host'));
        tenant = d.tenants.byId(claimed);
        if (!tenant) return refuse(res, ctx, edgeError('forbidden', `unknown tenant in claim "${tenantClaimName}"`));
      } else {
        tenant = hostTenant ?? (defaultTenantId ? d.tenants.byId(defaultTenantId) : undefined);
        if (!tenant) return refuse(res, ctx, edgeError('forbidden', 'no tenant for this request'));
      }
      ctx.tenant = tenant; // refusals from here on are metered for the tenant
      // 7. Authorize: role set against access set.
      if (!isAllowed(verified.roles, route.access)) return refuse(res, ctx, edgeError('forbidden', 'role not allowed on this route'));
      // 8. Tenant gates.
      if (tenant.status === 'suspended') return refuse(res, ctx, edgeError('cluster_suspended'));
      if (route.feature !== null && !tenant.plan.features.has(route.feature)) {
        return refuse(res, ctx, edgeError('feature_gated', `feature "${route.feature}" is not in plan "${tenant.plan.id}"`));
      }
    }
    ctx.tenant = tenant;

    // Query of pops: validated, long-poll timeout capped.
    let pop: PopQuery | null = null;
    if (route.longPoll) {
      const parsed = parsePopQuery(target.query, tenant.limits.maxBatch, lp);
      if (isEdgeError(parsed)) return refuse(res, ctx, parsed);
      pop = parsed;
    }

    // Body: read only where a request has one; parsed only where the proxy must read it.
    let body: Buffer | null = null;
    let facts: BodyFacts | null = null;
    if (req.method !== 'GET' && req.method !== 'DELETE' || hasBody(req)) {
      const read = await readBody(req, Math.min(config.server.bodyLimitBytes, tenant.limits.maxPayloadBytes));
      if (isEdgeError(read)) {
        if (read.code === 'payload_too_large') closeAfterResponse(req, res);
        return refuse(res, ctx, read);
      }
      body = read;
      ctx.bytesIn = read.length;
      const parsed = route.body === 'push' ? pushFacts(read) : route.body === 'transaction' ? transactionFacts(read) : route.body === 'ack' ? ackFacts(read) : null;
      if (isEdgeError(parsed)) return refuse(res, ctx, parsed);
      facts = parsed;
      if (facts) ctx.requestMessages = facts.messages;
      if (facts && route.body !== 'ack' && facts.messages > tenant.limits.maxBatch) {
        return refuse(res, ctx, edgeError('invalid_request', `push of ${facts.messages} items exceeds the plan's maximum of ${tenant.limits.maxBatch}`));
      }
    }
    if (route.writes && (route.body !== 'transaction' || (facts?.messages ?? 0) > 0) && d.storageBlocked(tenant.id)) {
      return refuse(res, ctx, edgeError('storage_quota_exceeded'));
    }

    // 9. Limits and quotas: one decision, at most one Redis round trip.
    const admitted = d.limiter.admit({ tenant, messages: facts?.messages ?? 0, ingressBytes: ctx.bytesIn, parkedPoll: pop?.wait ?? false });
    const admission = admitted instanceof Promise ? await admitted : admitted;
    if (admission.headers) Object.assign(ctx.headers, admission.headers);
    ctx.limit = admission.refusal ? admission.refusal.code : 'admitted';
    if (admission.refusal) return refuse(res, ctx, admission.refusal);
    const release = admission.release;
    // Metering and lease learning read the relayed body of pushes, pops and acks.
    const capture = route.meter !== 'none' && route.meter !== 'transaction';
    ctx.awaitBody = capture;
    const parked = pop?.wait === true;
    if (parked) d.metrics.parked(tenant.id, 1);
    let result: ForwardResult | null = null;
    try {
      if (clientGone(res)) return;
      // 10-12. Pick a broker for the lane, forward, relay.
      // Stay synchronous unless a token has to be minted (STYLE: no promise for a sync step).
      const auth = upstreamAuthorization(ctx.identity, tenant);
      const authorization = auth instanceof Promise ? await auth : auth;
      const path = pop ? (pop.forwardQuery === '' ? target.path : `${target.path}?${pop.forwardQuery}`) : target.query === '' ? target.path : `${target.path}?${target.query}`;
      const timeout = pop?.wait ? pop.timeoutMs + lp.slackMs : upstreamCfg.requestTimeoutMs;
      result = await forwardToCluster(res, ctx, tenant, laneOf(route, match.params, pop, facts), parked, {
        method: req.method as 'GET',
        path,
        headers: upstreamHeaders(req.headers, {
          clientIp: req.socket?.remoteAddress ?? '',
          proto: isTls(req) ? 'https' : 'http',
          host: hostTenant ? host : null,
          requestId: ctx.id,
          trustProxy: config.server.trustProxy,
          authorization,
          tenantHeader: config.upstreamIdentity.tenantHeader ? tenant.id : null,
          contentLength: body ? body.length : null,
        }),
        body,
        headersTimeoutMs: timeout,
        bodyTimeoutMs: timeout,
        capture,
        responseHeaders: ctx.headers,
      });
    } finally {
      release?.();
      if (parked) d.metrics.parked(tenant.id, -1);
      if (result?.body) afterResponse(ctx, route, result);
      else settleUsage(ctx, undefined);
    }
  }

  /** Tries brokers of the lane in ring order while nothing was sent (DESIGN §1, never after). */
  async function forwardToCluster(
    res: EdgeResponse,
    ctx: RequestContext,
    tenant: Tenant,
    lane: Lane,
    parked: boolean,
    fwd: Parameters<typeof forwardOnce>[1],
  ): Promise<ForwardResult | null> {
    let tried: Set<string> | null = null;
    let broker = (lane.leaseId !== null ? d.clusters.brokerForLease(tenant, lane.leaseId) : undefined) ?? d.clusters.pick(tenant, lane.key, null);
    for (;;) {
      if (broker === undefined) {
        // Every broker tried refused the connection and is now marked down: none is healthy.
        refuse(res, ctx, edgeError('no_upstream', tried ? 'no broker accepted the connection' : undefined));
        return null;
      }
      ctx.broker = broker;
      d.clusters.begin(broker);
      const sentAt = performance.now();
      const result = await forwardOnce(d.pools.get(broker, parked), fwd, res);
      ctx.upstreamMs += performance.now() - sentAt;
      d.clusters.end(broker);
      ctx.status = result.status;
      ctx.bytesOut = result.bytesOut;
      if (result.failure === null) {
        if (result.status >= 500) d.clusters.reportFailure(broker, 'status5xx');
        else d.clusters.reportSuccess(broker);
        return result;
      }
      if (result.failure === 'client_aborted') {
        ctx.code = null;
        log.debug({ reqId: ctx.id, broker }, 'client went away; upstream request aborted');
        return null;
      }
      // A parked pop that ran out of time is no sign of a sick broker (DESIGN §4 passive health).
      if (!(result.failure === 'timeout' && fwd.headersTimeoutMs > upstreamCfg.requestTimeoutMs)) {
        d.clusters.reportFailure(broker, result.failure === 'protocol' ? 'reset' : result.failure);
      }
      if (result.status !== 0) return null;
      if (result.failure === 'connect' && !result.sent && !clientGone(res)) {
        (tried ??= new Set()).add(broker);
        broker = d.clusters.pick(tenant, lane.key, tried);
        continue;
      }
      refuse(res, ctx, failureError(result.failure));
      return null;
    }
  }

  /**
   * Signature checks behind a per-client-IP limit on failures: an address that keeps sending bad
   * tokens gets 429 without costing a verification. A cache hit never gets here.
   */
  async function verifyThrottled(req: EdgeRequest, token: string): Promise<Identity | EdgeError> {
    const client = clientOf(req);
    const blocked = await d.clientLimits.authBlocked(client);
    if (blocked) return blocked;
    const verified = await d.verifier.verify(token);
    if (isEdgeError(verified)) d.clientLimits.authFailed(client);
    return verified;
  }

  function clientOf(req: EdgeRequest): string {
    return clientKey(req.socket?.remoteAddress, req.headers['x-forwarded-for'], config.server.trustProxy);
  }

  /**
   * Public routes (the health check) are answered by the edge: no body, limited per client IP, not
   * billed to a tenant, and only `status`, from the active health checks of the tenant's brokers
   * (their own /health is never relayed to anonymous callers).
   */
  async function answerPublic(req: EdgeRequest, res: EdgeResponse, ctx: RequestContext, tenant: Tenant): Promise<void> {
    const limited = await d.clientLimits.publicRequest(clientOf(req));
    if (limited) return refuse(res, ctx, limited);
    if (hasBody(req)) {
      closeAfterResponse(req, res);
      return refuse(res, ctx, edgeError('invalid_request', 'this route takes no body'));
    }
    // Read-only (snapshot, not pick): a health check is not a placement.
    if (!d.clusters.snapshot([tenant])[0]!.brokers.some((b) => b.healthy)) return refuse(res, ctx, edgeError('no_upstream'));
    ctx.status = 200;
    res.writeHead(200, { ...ctx.headers, 'content-type': 'application/json', 'content-length': String(HEALTHY.length), 'cache-control': 'no-store' });
    res.end(HEALTHY);
  }

  function upstreamAuthorization(identity: Identity | null, tenant: Tenant): string | null | Promise<string> {
    if (identity === null || identity === undefined) return null;
    if (identityMode === 'passthrough') return `Bearer ${identity.token}`;
    if (identityMode === 'mint' && d.minter) return d.minter.authorizationFor(identity, tenant.id);
    return null;
  }

  /** Lease learning and metering read the relayed body after it went out (never delaying it). */
  function afterResponse(ctx: RequestContext, route: RouteSpec, result: ForwardResult): void {
    const broker = ctx.broker;
    setImmediate(() => {
      let doc: unknown;
      try {
        doc = JSON.parse(result.body!.toString('utf8'));
      } catch {
        doc = undefined;
      }
      if (route.lane === 'pop-queue' || route.lane === 'pop-ns') {
        const leaseId = (doc as { leaseId?: unknown } | null)?.leaseId;
        if (typeof leaseId === 'string' && broker) d.clusters.learnLease(leaseId, broker);
      }
      settleUsage(ctx, doc);
    });
  }

  /** The relayed body is parsed, or there is none: record now if the response already finished. */
  function settleUsage(ctx: RequestContext, doc: unknown): void {
    ctx.response = doc;
    ctx.awaitBody = false;
    if (ctx.done) recordUsage(ctx);
  }

  /** One metering record per request, once it finished and its relayed body (if any) was parsed. */
  function recordUsage(ctx: RequestContext): void {
    if (ctx.recorded || !ctx.tenant || !ctx.route) return;
    ctx.recorded = true;
    d.usage.record({
      tenantId: ctx.tenant.id,
      route: ctx.route,
      status: ctx.status,
      code: ctx.code,
      bytesIn: ctx.bytesIn,
      bytesOut: ctx.bytesOut,
      requestMessages: ctx.requestMessages,
      response: ctx.response,
    });
  }

  function refuse(res: EdgeResponse, ctx: RequestContext, err: EdgeError): void {
    ctx.status = err.status;
    ctx.code = err.code;
    send(res, ctx, err);
  }

  /** One access-log line, one metrics observation and one metering record per request, whichever way it ended. */
  function finish(req: EdgeRequest, ctx: RequestContext): void {
    if (ctx.done) return;
    ctx.done = true;
    const durationMs = d.clock() - ctx.startMs;
    if (!ctx.awaitBody) recordUsage(ctx);
    d.metrics.request(ctx.tenant?.id ?? null, ctx.route?.name ?? null, ctx.status, ctx.code, performance.now() - ctx.startedAt, ctx.upstreamMs, ctx.limit);
    if (!accessLog) return;
    const traceparent = ONE_OF(req.headers.traceparent);
    log.info({
      reqId: ctx.id,
      tenant: ctx.tenant?.id ?? null,
      sub: ctx.identity?.sub ?? null,
      route: ctx.route?.name ?? null,
      method: req.method,
      status: ctx.status,
      code: ctx.code,
      bytesIn: ctx.bytesIn,
      bytesOut: ctx.bytesOut,
      ms: durationMs,
      broker: ctx.broker,
      proto: req.httpVersion,
      trace: traceparent && traceparent.length >= 55 ? traceparent.slice(3, 35) : null,
    }, 'request');
  }
}

/** The broker placement a request asks for (DESIGN §4): a ring key, or the broker of a lease. */
interface Lane {
  readonly key: string | null;
  readonly leaseId: string | null;
}

function laneOf(
  route: RouteSpec,
  params: Readonly<Record<string, string | undefined>>,
  pop: PopQuery | null,
  facts: BodyFacts | null,
): Lane {
  switch (route.lane) {
    case 'pop-queue':
      return { key: popQueueLaneKey(params.queue ?? '', params.partition, pop!.params), leaseId: null };
    case 'pop-ns':
      return { key: popNamespaceLaneKey(pop!.params), leaseId: null };
    case 'push':
      return { key: pushLaneKey(facts?.firstItem), leaseId: null };
    case 'lease':
      return { key: null, leaseId: params.leaseId ?? facts?.leaseId ?? null };
    default:
      return { key: null, leaseId: null };
  }
}

function hostOf(req: EdgeRequest): string {
  const raw = ONE_OF(req.headers[':authority'] as string | undefined) ?? ONE_OF(req.headers.host) ?? '';
  const v = raw.charCodeAt(0) === 91 /* [ */ ? raw.slice(0, raw.indexOf(']') + 1) : raw.split(':', 1)[0]!;
  return v.toLowerCase();
}

/** 'authorization' or 'host' when the raw request repeats it; null otherwise. Allocation-free. */
function duplicatedSingleton(raw: readonly string[]): 'authorization' | 'host' | null {
  let auth = 0;
  let host = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 13 && name.toLowerCase() === 'authorization') {
      if (++auth > 1) return 'authorization';
    } else if (name.length === 4 && name.toLowerCase() === 'host') {
      if (++host > 1) return 'host';
    }
  }
  return null;
}

const HEALTHY = Buffer.from('{"status":"healthy"}');

function hasBody(req: EdgeRequest): boolean {
  const cl = req.headers['content-length'];
  return (cl !== undefined && cl !== '0') || req.headers['transfer-encoding'] !== undefined;
}

function isTls(req: EdgeRequest): boolean {
  return (req.socket as { encrypted?: boolean } | null)?.encrypted === true;
}

/** h1 only: after a 413 the rest of the body is not read, so the connection must not be reused. */
function closeAfterResponse(req: EdgeRequest, res: EdgeResponse): void {
  if (req.httpVersionMajor === 1 && !res.headersSent) res.setHeader('connection', 'close');
}

function send(res: EdgeResponse, ctx: RequestContext | null, err: EdgeError): void {
  if (res.headersSent || clientGone(res)) return;
  const r = renderError(err);
  res.writeHead(r.status, ctx ? { ...ctx.headers, ...r.headers } : r.headers);
  res.end(r.body);
}
