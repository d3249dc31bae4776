/**
 * The request path (docs/architecture.md): host tenant, CORS, route, authenticate, token
 * tenant, authorize, gates, body, limits, pick a broker, forward, respond. Each step either yields
 * a value for the next or a refusal (an EdgeError), and the first refusal ends the request.
 * Decisions live in their modules; this file only sequences them and writes the response.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { PassThrough, type Readable } from 'node:stream';
import { constants as http2Constants } from 'node:http2';
import { isAllowed, roleRefusal } from './auth/access.js';
import { extractToken, type Identity, type TokenVerifier } from './auth/jwt.js';
import { unverifiedTenantClaim, type TenantVerifiers } from './auth/verifiers.js';
import type { UpstreamMinter } from './auth/mint.js';
import { MAX_HOST_LENGTH, type RawConfig } from './config/schema.js';
import { actualResponseHeaders, preflightVerdict, withoutActualResponseHeaders } from './cors/policy.js';
import { edgeError, isEdgeError, renderError, type EdgeError, type ErrorCode } from './errors.js';
import { clientKey, type ClientLimits } from './limits/client-limits.js';
import { HeadsInFlight } from './limits/heads-in-flight.js';
import { createClientAddresses } from './net/client-address.js';
import type { Admission, Limiter } from './limits/limiter.js';
import { lingerOnClose, type LingerBounds } from './listen/lingering.js';
import { duplicatedSingleton } from './listen/raw-headers.js';
import type { EdgeRequest, EdgeResponse, RequestHandler } from './listen/servers.js';
import { MeteredExchange, type UsageRecorder } from './metering/recorder.js';
import { accessLogWriter, targetParts } from './observability/access-log.js';
import type { Logger } from './observability/log.js';
import type { LimitOutcome, RequestMetrics } from './observability/metrics.js';
import type { RouteMatcher } from './routes/match.js';
import { normalizeTarget } from './routes/match.js';
import { declaredParams, readQuery, type QueryFacts } from './routes/query-params.js';
import type { RouteSpec } from './routes/table.js';
import { ackFacts, bodyTooLarge, pushFacts, readBody, transactionFacts, type BodyFacts } from './stages/body.js';
import { acceptableRequestId, contentEncodingRefusal, upstreamHeaders } from './upstream/upstream-headers.js';
import { canonicalHost, hostTooLong, type Tenant, type TenantDirectory } from './tenants/model.js';
import { BodyBudget, type BodyAccount } from './stages/body-budget.js';
import { candidateTenant, tokenFits } from './tenants/resolve.js';
import { clientGone } from './upstream/forward.js';
import { popNamespaceLaneKey, popQueueLaneKey, pushLaneKey } from './upstream/lane-key.js';
import type { Lane, ProxyExchange, UpstreamProxy } from './upstream/proxy.js';

/** Everything the pipeline talks to; app.ts builds it. */
export interface PipelineDeps {
  readonly config: RawConfig;
  readonly routes: RouteMatcher;
  readonly tenants: TenantDirectory;
  /** Storage gate (docs/limits.md): true while the tenant is over its plan's storage. */
  readonly storageBlocked: (tenantId: string) => boolean;
  /** The global verifier and each tenant's own (tenants with their own identity provider). */
  readonly verifiers: TenantVerifiers;
  readonly limiter: Limiter;
  /** Per-client-IP limits on failed authentication and anonymous routes. */
  readonly clientLimits: ClientLimits;
  /** Broker choice, retry, passive health and lease learning. */
  readonly proxy: UpstreamProxy;
  readonly minter: UpstreamMinter | null;
  readonly usage: UsageRecorder;
  readonly metrics: RequestMetrics;
  readonly log: Logger;
  readonly clock: () => number;
}

/** Per-request state, every field present from the start (one stable shape). */
class RequestContext extends MeteredExchange<Tenant> implements ProxyExchange {
  identity: Identity | null = null;
  broker: string | null = null;
  /** Stopwatch start for the latency histograms (performance.now(): monotonic, sub-millisecond). */
  readonly startedAt = performance.now();
  /** Dispatch to last relayed byte, written by the proxy as it happens (ms). */
  upstreamMs = 0;
  /** The limiter's decision; null when it was not consulted. */
  limit: LimitOutcome = null;
  done = false;
  /** A refusal closes the connection (h1) instead of draining the unread body: see refuse(). */
  closeOnRefusal = false;
  /** An h1 request whose close on refusal reads on and discards for a while (lingering close); null for h2 and for refusals of the bytes or time a body takes. */
  linger: IncomingMessage | null = null;
  /** The body bytes this request holds in the budgets, given back when it ends. */
  body: BodyAccount | null = null;
  /** Headers the edge adds to whatever answer goes out (X-Request-Id, CORS, RateLimit). */
  headers: Record<string, string>;
  /** Ends this request's count among its tenant's heads in flight (Limiter.preAdmit), if it was counted. */
  #endHead: (() => void) | null = null;
  constructor(
    readonly id: string,
    readonly startMs: number,
    recorder: UsageRecorder,
  ) {
    super(recorder);
    this.headers = { 'x-request-id': id };
  }

  countHead(end: (() => void) | null): void {
    this.#endHead = end;
    // The request already ended (a client gone while it was authenticated): nothing will end it later.
    if (this.done) this.endHead();
  }

  /** Once admit decided, or when the request ends without it (a refused body, a client gone). */
  endHead(): void {
    const end = this.#endHead;
    if (end === null) return;
    this.#endHead = null;
    end();
  }
}

const ONE_OF = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? undefined : v);

export function createPipeline(d: PipelineDeps): RequestHandler {
  const { config, log } = d;
  const lp = config.server.longPoll;
  const upstreamCfg = config.upstream;
  const identityMode = config.upstreamIdentity.mode;
  const writeAccess = config.log.accessLog ? accessLogWriter(log) : null;
  const defaultTenantId = config.auth.defaultTenant;
  const tenantClaimName = config.auth.tenantClaim;
  const clientAddresses = createClientAddresses(config.server.trustedProxies);
  const tenantById = (id: string): Tenant | undefined => d.tenants.byId(id);
  const paramsOf = (route: RouteSpec) => declaredParams(route.name, config.queryAllow[route.name]);
  const budgetCfg = config.server.bodyBudget;
  const bodyBudget = new BodyBudget(budgetCfg.perTenantBytes, budgetCfg.perProcessBytes);
  const lingering = config.server.lingeringClose;
  const headsInFlight = new HeadsInFlight();

  return (req, res) => {
    handle(req, res).catch((err: unknown) => {
      // A bug, never a client's doing: answer 502 if still possible, keep the process alive.
      log.error({ err }, 'pipeline failure');
      if (!res.headersSent && !clientGone(res)) send(res, null, edgeError('bad_gateway', 'internal error'));
      else res.destroy();
    });
  };

  async function handle(req: EdgeRequest, res: EdgeResponse): Promise<void> {
    const ctx = new RequestContext(acceptableRequestId(req.headers['x-request-id']) ?? randomUUID(), d.clock(), d.usage);
    res.once('finish', () => finish(req, ctx));
    res.once('close', () => finish(req, ctx));
    ctx.closeOnRefusal = hasBody(req) && !cheapToDrain(req);
    // A body awaited with 100-continue is not coming until invited: nothing to linger for yet.
    if (!('stream' in req) && !expectsContinue(req)) ctx.linger = req;

    // Node keeps the first of duplicated Host/Authorization headers; an edge must not guess which
    // one a broker or an intermediary would read, so such requests are refused outright.
    const dup = duplicatedSingleton(req.rawHeaders);
    if (dup !== null) return refuse(res, ctx, dup === 'authorization' ? edgeError('unauthorized', 'more than one Authorization header') : edgeError('invalid_request', `more than one ${dup} header`));

    // 1. Tenant by host.
    const host = hostOf(req);
    if (hostTooLong(host)) return refuse(res, ctx, edgeError('invalid_request', `host name longer than ${MAX_HOST_LENGTH} characters`));
    const hostTenant = host === '' ? undefined : d.tenants.byHost(host);

    // 2. CORS, before authentication: preflights carry no token. On a host no tenant lists, the
    // default tenant's policy answers here and the acting tenant's is checked once the token named
    // it (docs/browser.md).
    const origin = ONE_OF(req.headers.origin);
    const corsTenant = hostTenant ?? (defaultTenantId ? d.tenants.byId(defaultTenantId) : undefined);
    if (origin !== undefined) {
      const policy = corsTenant?.cors;
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
      // The host picks whose keys verify the token; the token must then name that tenant, unless
      // the tenant's own keys accepted it (docs/tenancy.md).
      const candidate = candidateTenant(hostTenant, hostTenant ? null : unverifiedTenantClaim(token, tenantClaimName), defaultTenantId ? tenantById(defaultTenantId) : undefined, tenantById);
      const verifier = isEdgeError(candidate) ? d.verifiers.global : d.verifiers.forTenant(candidate);
      const verified = verifier.cached(token) ?? (await verifyThrottled(req, verifier, token));
      if (isEdgeError(verified)) return refuse(res, ctx, verified);
      ctx.identity = verified;
      if (isEdgeError(candidate)) return refuse(res, ctx, candidate);
      const unfit = tokenFits(candidate, verified.tenant, defaultTenantId);
      if (unfit) return refuse(res, ctx, unfit);
      tenant = candidate;
      ctx.tenant = tenant; // refusals from here on are metered for the tenant
      if (origin !== undefined && tenant !== corsTenant && !tenant.cors.allows(origin)) {
        withoutActualResponseHeaders(ctx.headers);
        return refuse(res, ctx, edgeError('forbidden', 'origin not allowed'));
      }
      // 7. Authorize: role set against access set.
      if (!isAllowed(verified.roles, route.access)) return refuse(res, ctx, roleRefusal(verified));
      // 8. Tenant gates.
      if (tenant.status === 'suspended') return refuse(res, ctx, edgeError('cluster_suspended'));
      if (route.feature !== null && !tenant.plan.features.has(route.feature)) {
        return refuse(res, ctx, edgeError('feature_gated', `feature "${route.feature}" is not in plan "${tenant.plan.id}"`));
      }
    }
    ctx.tenant = tenant;

    // Query: read against the route's declared parameters, capped; the broker gets the edge's rebuild of it.
    const query = readQuery(target.query, { params: paramsOf(route), longPoll: route.longPoll, maxBatch: tenant.limits.maxBatch, longPollSettings: lp });
    if (isEdgeError(query)) return refuse(res, ctx, query);
    const encoded = contentEncodingRefusal(req.headers);
    if (encoded) return refuse(res, ctx, encoded);

    // Refusals this instance already knows (deny cache) come before the body, so a throttled
    // tenant's upload is neither read nor, with Expect: 100-continue, sent (docs/limits.md).
    const declared = declaredLength(req);
    const pre = d.limiter.preAdmit({ tenant, messages: 0, ingressBytes: declared ?? 0, parkedPoll: query.wait });
    if (pre?.refusal) return refuseByLimits(res, ctx, pre);
    // The request rate charged from the head, locally: no more heads in flight than the burst (heads-in-flight.ts).
    const inFlight = headsInFlight.enter(tenant.id, tenant.limits.requestBurst);
    if (inFlight === null) {
      pre?.release?.();
      ctx.limit = 'rate_limited';
      return refuse(res, ctx, edgeError('rate_limited', 'too many requests in flight for this tenant', { retryAfterSec: 1 }));
    }
    const preRelease = pre?.release;
    ctx.countHead(
      preRelease
        ? () => {
            inFlight();
            preRelease();
          }
        : inFlight,
    );

    // Body: read only where a request has one; parsed only where the proxy must read it; a body
    // of declared length the proxy does not parse is streamed to the broker after admission.
    let body: Buffer | null = null;
    // A body of declared length streamed to the broker, opened only once the request is admitted.
    let streamed = false;
    let facts: BodyFacts | null = null;
    // The body length the limiter admits and the broker is told.
    let bodyLength = 0;
    if (req.method !== 'GET' && req.method !== 'DELETE' || hasBody(req)) {
      const limit = Math.min(config.server.bodyLimitBytes, tenant.limits.maxPayloadBytes);
      if (route.body === 'stream' && declared !== null) {
        if (declared > limit) return refuse(res, ctx, bodyTooLarge(limit));
        // Admitted on its declared length (Node's parsers never let more through), but metered as
        // the proxy relays it (ctx.bytesIn): a client that stops part way is billed for what the
        // broker got, and a body refused before forwarding for nothing.
        bodyLength = declared;
        streamed = declared !== 0;
      } else {
        // A buffered body takes its bytes from the budgets before it is read: its declared length
        // up front, or (length unknown) each chunk as it comes. No body can outgrow a tenant's share.
        const bufferLimit = Math.min(limit, budgetCfg.perTenantBytes);
        if (declared !== null && declared > bufferLimit) return refuse(res, ctx, bodyTooLarge(bufferLimit));
        const account = (ctx.body = bodyBudget.open(tenant.id));
        const over = declared === null ? null : account.take(declared);
        if (over !== null) return refuseUnread(res, ctx, over);
        sendContinue(req, res);
        if (!('stream' in req)) ctx.linger = req;
        const read = await readBody(req, bufferLimit, { account, deadlineMs: budgetCfg.deadlineMs });
        if (isEdgeError(read)) {
          // A body the edge began to read costs its request, whatever became of it.
          chargeRequest(tenant);
          const spent = read.code === 'rate_limited' || read.code === 'edge_overloaded' || read.code === 'request_timeout';
          return spent ? refuseUnread(res, ctx, read) : refuse(res, ctx, read);
        }
        ctx.closeOnRefusal = false;
        body = read;
        ctx.bytesIn = bodyLength = read.length;
        const parsed = route.body === 'push' ? pushFacts(read) : route.body === 'transaction' ? transactionFacts(read) : route.body === 'ack' ? ackFacts(read) : null;
        if (isEdgeError(parsed)) return refuse(res, ctx, parsed);
        facts = parsed;
        if (facts) {
          ctx.requestMessages = facts.messages;
          ctx.requestAcks = facts.acks;
        }
        if (facts && route.body !== 'ack' && facts.messages > tenant.limits.maxBatch) {
          return refuse(res, ctx, edgeError('invalid_request', `push of ${facts.messages} items exceeds the plan's maximum of ${tenant.limits.maxBatch}`));
        }
      }
    }
    if (route.writes && (route.body !== 'transaction' || (facts?.messages ?? 0) > 0) && d.storageBlocked(tenant.id)) {
      return refuse(res, ctx, edgeError('storage_quota_exceeded'));
    }

    // 9. Limits and quotas: one decision, at most one Redis round trip.
    const admitted = d.limiter.admit({ tenant, messages: facts?.messages ?? 0, ingressBytes: bodyLength, parkedPoll: query.wait });
    const admission = admitted instanceof Promise ? await admitted : admitted;
    ctx.endHead();
    if (admission.refusal) return refuseByLimits(res, ctx, admission);
    if (admission.headers) Object.assign(ctx.headers, admission.headers);
    ctx.limit = 'admitted';
    const release = admission.release;
    if (streamed) {
      sendContinue(req, res);
      // From here undici reads the body; what it leaves is discarded (by Node on h1, below on h2).
      ctx.closeOnRefusal = false;
    }
    // Metering and lease learning read the relayed answers of pushes, pops, acks and transactions as they pass.
    const parked = query.wait;
    if (parked) d.metrics.parked(tenant.id, 1);
    try {
      if (clientGone(res)) return;
      // 10-12. Pick a broker for the lane, forward, relay.
      // Stay synchronous unless a token has to be minted: no promise for a synchronous step.
      const auth = upstreamAuthorization(ctx.identity, tenant);
      const authorization = auth instanceof Promise ? await auth : auth;
      const path = query.forward === '' ? target.path : `${target.path}?${query.forward}`;
      const timeout = parked ? query.timeoutMs + lp.slackMs : upstreamCfg.requestTimeoutMs;
      const refusal = await d.proxy.forward(res, ctx, tenant, {
        method: req.method as 'GET',
        path,
        headers: upstreamHeaders(req.headers, {
          clientIp: req.socket?.remoteAddress ?? '',
          proto: isTls(req) ? 'https' : 'http',
          host: hostTenant ? host : null,
          requestId: ctx.id,
          trustProxy: clientAddresses.trusts(req.socket?.remoteAddress),
          authorization,
          tenantHeader: config.upstreamIdentity.tenantHeader || tenant.tenancyAwareBrokers ? tenant.id : null,
          contentLength: body || streamed ? bodyLength : null,
        }),
        body: streamed ? streamedBody(req) : body,
        headersTimeoutMs: timeout,
        bodyTimeoutMs: timeout,
        capture: route.meter !== 'none',
        responseHeaders: ctx.headers,
        lane: laneOf(route, match.params, query, facts),
        parked,
        learnsLease: route.lane === 'pop-queue' || route.lane === 'pop-ns',
      });
      if (refusal !== null) refuse(res, ctx, refusal);
    } finally {
      // The exchange is over: what undici did not read of an h2 body is discarded (Node does it on
      // h1), so the stream can end and close.
      if (streamed && 'stream' in req) {
        req.stream.unpipe();
        req.stream.resume();
      }
      release?.();
      if (parked) d.metrics.parked(tenant.id, -1);
    }
  }

  /**
   * Signature checks behind the per-client gate (src/limits/client-limits.ts): 429 before the
   * check for an identity that failed too often from this address, or an address over its checks
   * per second. A cache hit never gets here.
   */
  function verifyThrottled(req: EdgeRequest, verifier: TokenVerifier, token: string): Promise<Identity | EdgeError> {
    return verifier.verify(token, d.clientLimits.signatureGate(clientOf(req), token));
  }

  /** The client's address, after trusted proxies (what the access log shows). */
  function clientAddressOf(req: EdgeRequest): string {
    return clientAddresses.of(req.socket?.remoteAddress, req.headers['x-forwarded-for']);
  }

  /** The key per-client limits count by: the address, or its /64 for IPv6. */
  function clientOf(req: EdgeRequest): string {
    return clientKey(clientAddressOf(req));
  }

  /**
   * Public routes (the health check) are answered by the edge: no body, limited per client IP, not
   * billed to a tenant, and only `status`, from the active health checks of the tenant's brokers
   * (their own /health is never relayed to anonymous callers).
   */
  async function answerPublic(req: EdgeRequest, res: EdgeResponse, ctx: RequestContext, tenant: Tenant): Promise<void> {
    const limited = await d.clientLimits.publicRequest(clientOf(req));
    if (limited) return refuse(res, ctx, limited);
    if (hasBody(req)) return refuse(res, ctx, edgeError('invalid_request', 'this route takes no body'));
    if (!d.proxy.reachable(tenant)) return refuse(res, ctx, edgeError('no_upstream'));
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

  function refuse(res: EdgeResponse, ctx: RequestContext, err: EdgeError): void {
    ctx.status = err.status;
    ctx.code = err.code;
    // An unread body is not drained when it may be large, or was never sent (100-continue): the
    // connection is closed instead, so refusing a big upload costs no more than refusing a small one.
    if (ctx.closeOnRefusal) closeAfterResponse(res, ctx.linger === null ? null : { req: ctx.linger, bounds: lingering });
    send(res, ctx, err);
  }

  /** A refusal for the bytes or the time a body takes: the connection is closed without reading on. */
  function refuseUnread(res: EdgeResponse, ctx: RequestContext, err: EdgeError): void {
    ctx.closeOnRefusal = true;
    ctx.linger = null;
    if (!('stream' in res)) destroyAfterResponse(res);
    refuse(res, ctx, err);
  }

  /**
   * Charges the request rate of a request whose body was being read and never came whole: its
   * head was counted in flight locally (heads-in-flight.ts) but never reaches the admit, so this
   * spends it in the shared bucket. Nothing waits on it; its refusal, if any, is for the next requests.
   */
  function chargeRequest(tenant: Tenant): void {
    const charged = d.limiter.admit({ tenant, messages: 0, ingressBytes: 0, parkedPoll: false });
    if (charged instanceof Promise) charged.catch((err: unknown) => log.warn({ err }, 'charging an unread body failed'));
  }

  /** A limiter refusal: its RateLimit headers and outcome recorded, then refused. */
  function refuseByLimits(res: EdgeResponse, ctx: RequestContext, admission: Admission): void {
    if (admission.headers) Object.assign(ctx.headers, admission.headers);
    ctx.limit = admission.refusal!.code;
    refuse(res, ctx, admission.refusal!);
  }

  /** One access-log line, one metrics observation and one metering record per request, whichever way it ended. */
  function finish(req: EdgeRequest, ctx: RequestContext): void {
    if (ctx.done) return;
    ctx.done = true;
    ctx.endHead();
    ctx.body?.close();
    const durationMs = d.clock() - ctx.startMs;
    ctx.ended();
    d.metrics.request(ctx.tenant?.id ?? null, ctx.route?.name ?? null, ctx.status, ctx.code, performance.now() - ctx.startedAt, ctx.upstreamMs, ctx.limit);
    if (writeAccess === null) return;
    const traceparent = ONE_OF(req.headers.traceparent);
    const target = targetParts(req.url ?? '');
    writeAccess({
      client: clientAddressOf(req),
      host: hostOf(req),
      path: target.path,
      queryLength: target.queryLength,
      // The edge's own answers carry a code; a relayed one is the broker's status.
      upstreamStatus: ctx.broker !== null && ctx.code === null && ctx.status !== 0 ? ctx.status : null,
      reqId: ctx.id,
      tenant: ctx.tenant?.id ?? null,
      sub: ctx.identity?.sub ?? null,
      route: ctx.route?.name ?? null,
      method: req.method ?? '',
      status: ctx.status,
      code: ctx.code,
      bytesIn: ctx.bytesIn,
      bytesOut: ctx.bytesOut,
      ms: durationMs,
      broker: ctx.broker,
      proto: req.httpVersion,
      trace: traceparent && traceparent.length >= 55 ? traceparent.slice(3, 35) : null,
    });
  }
}

function laneOf(
  route: RouteSpec,
  params: Readonly<Record<string, string | undefined>>,
  query: QueryFacts,
  facts: BodyFacts | null,
): Lane {
  switch (route.lane) {
    case 'pop-queue':
      return { key: popQueueLaneKey(params.queue ?? '', params.partition, query.values), leaseId: null };
    case 'pop-ns':
      return { key: popNamespaceLaneKey(query.values), leaseId: null };
    case 'push':
      return { key: pushLaneKey(facts?.firstItem), leaseId: null };
    case 'lease':
      return { key: null, leaseId: params.leaseId ?? facts?.leaseId ?? null };
    default:
      return { key: null, leaseId: null };
  }
}

/** The host a request names, without its port, in the form tenants list hosts (canonicalHost). */
function hostOf(req: EdgeRequest): string {
  const raw = ONE_OF(req.headers[':authority'] as string | undefined) ?? ONE_OF(req.headers.host) ?? '';
  let end: number;
  if (raw.charCodeAt(0) === 91 /* [ */) end = raw.indexOf(']') + 1;
  else {
    const colon = raw.indexOf(':');
    end = colon === -1 ? raw.length : colon;
  }
  return canonicalHost(end === raw.length ? raw : raw.slice(0, end));
}

const HEALTHY = Buffer.from('{"status":"healthy"}');

function hasBody(req: EdgeRequest): boolean {
  const cl = req.headers['content-length'];
  return cl === undefined ? req.headers['transfer-encoding'] !== undefined || h2BodyFollows(req) : cl !== '0';
}

/**
 * h2 needs no content-length: a stream its HEADERS frame did not end carries a body of unknown
 * length (the h1 chunked case), never "no body", or it would be forwarded without it.
 */
function h2BodyFollows(req: EdgeRequest): boolean {
  return 'stream' in req && !req.stream.endAfterHeaders;
}

function isTls(req: EdgeRequest): boolean {
  return (req.socket as { encrypted?: boolean } | null)?.encrypted === true;
}

/**
 * The rest of the body will not be read. h1: the connection must not be reused, and with `linger`
 * what still arrives is discarded for a while before it closes (lingering.ts). h2: once the
 * answer is out, RST_STREAM(NO_ERROR) tells the client to stop sending (RFC 9113 §8.1); without it
 * the unread body fills the stream's window and the stream never closes.
 */
function closeAfterResponse(res: EdgeResponse, linger: { req: IncomingMessage; bounds: LingerBounds } | null): void {
  if ('stream' in res) {
    const stream = res.stream;
    res.once('finish', () => {
      if (stream.destroyed) return;
      stream.close(http2Constants.NGHTTP2_NO_ERROR);
      // Node frees a closed stream only once its readable side ends, which a body left paused
      // (readBody stops at the limit) never does: the stream and its buffered bytes would stay in
      // the session. The answer and the RST_STREAM are queued already; the rest is discarded.
      stream.destroy();
    });
  } else if (!res.headersSent) {
    res.setHeader('connection', 'close');
    if (linger !== null) lingerOnClose(linger.req, linger.bounds);
  }
}

/**
 * h1: once the answer is handed to the kernel, the connection is destroyed, before Node's discard
 * of the unread body (it reads on until the connection is closed) takes any of it: a herd of
 * refused uploads would otherwise each have its bytes read, a chunk at a time, for nothing. A
 * client still sending may see a reset instead of the answer.
 */
function destroyAfterResponse(res: ServerResponse): void {
  const socket = res.socket;
  if (socket !== null) res.once('finish', () => socket.destroy());
}

/**
 * The body as undici reads it. undici destroys a body stream once it has sent it, which for an h2
 * request's own stream would also reset the response: it reads a copy of the stream instead. A
 * stream that closes before its body ended fails the copy; one reset with CANCEL or NO_ERROR ends
 * it short, which undici refuses against the declared length. Either way the upstream request is
 * aborted.
 */
function streamedBody(req: EdgeRequest): Readable {
  if (!('stream' in req)) return req;
  const stream = req.stream;
  const copy = new PassThrough();
  // undici listens while it sends the copy; before (a request queued for a connection) and after
  // (a broker that could not be reached) the failure is only for undici to find.
  copy.on('error', () => {});
  stream.pipe(copy);
  stream.once('close', () => {
    if (!stream.readableEnded) copy.destroy(new Error('request body aborted'));
  });
  return copy;
}

/** The declared body length; null when it is not known in advance (chunked, h2 without content-length) or not one number. */
function declaredLength(req: EdgeRequest): number | null {
  const cl = req.headers['content-length'];
  if (cl === undefined) return req.headers['transfer-encoding'] === undefined && !h2BodyFollows(req) ? 0 : null;
  const n = Number(cl);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/** Unread bodies up to this size are cheaper to discard (Node reads and drops them) than a new connection. */
const DRAIN_MAX_BYTES = 64 * 1024;

/** True when a refusal may leave Node to discard the unread body and keep the connection. */
function cheapToDrain(req: EdgeRequest): boolean {
  const n = declaredLength(req);
  return n !== null && n <= DRAIN_MAX_BYTES && !expectsContinue(req);
}

function expectsContinue(req: EdgeRequest): boolean {
  const e = req.headers.expect;
  return typeof e === 'string' && e.toLowerCase() === '100-continue';
}

/** Lets a client that asked for it (Expect: 100-continue) send its body: only once the edge will read it. */
function sendContinue(req: EdgeRequest, res: EdgeResponse): void {
  if (expectsContinue(req) && !res.headersSent) res.writeContinue();
}

function send(res: EdgeResponse, ctx: RequestContext | null, err: EdgeError): void {
  if (res.headersSent || clientGone(res)) return;
  const r = renderError(err);
  res.writeHead(r.status, ctx ? { ...ctx.headers, ...r.headers } : r.headers);
  res.end(r.body);
}
