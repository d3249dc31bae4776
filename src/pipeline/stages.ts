/**
 * The stages of the request path (docs/architecture.md, "The request path"). A stage is a named
 * module-level function with one signature: it reads and writes the request's Exchange and returns
 * CONTINUE, a refusal (an EdgeError, rendered by the loop), or ANSWERED when it wrote the answer
 * itself. Each stage calls into the module that owns its decision; chain.ts says which stages a
 * route runs, in which order.
 */
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import { isAllowed, roleRefusal } from '../auth/access.js';
import { bearerToken, wellFormedToken, type Identity, type TokenVerifier } from '../auth/jwt.js';
import type { TenantVerifiers } from '../auth/verifiers.js';
import type { UpstreamMinter } from '../auth/mint.js';
import type { BodyBudget } from '../body/budget.js';
import type { BodyPace, PacedBody } from '../body/pace.js';
import { ackFacts, pushFacts, transactionFacts } from '../body/facts.js';
import type { RawConfig } from '../config/schema.js';
import { actualResponseHeaders, preflightVerdict, withoutActualResponseHeaders } from '../cors/policy.js';
import { edgeError, isEdgeError, type EdgeError } from '../errors.js';
import { clientKey, type ClientLimits } from '../limits/client-limits.js';
import type { HeadsInFlight } from '../limits/heads-in-flight.js';
import type { Admission, Limiter } from '../limits/limiter.js';
import type { LingerBounds } from '../listen/lingering.js';
import { bodyTooLarge, readBody } from '../listen/read-body.js';
import { clientGone, sendContinue, singleValue } from '../listen/transport.js';
import { duplicatedSingleton } from '../listen/raw-headers.js';
import type { UsageRecorder } from '../metering/recorder.js';
import type { ClientAddresses } from '../net/client-address.js';
import type { Logger } from '../observability/log.js';
import type { RequestMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/tracing.js';
import { isApiKey } from '../keys/format.js';
import { normalizeTarget, type RouteMatcher } from '../routes/match.js';
import { declaredParams, readQuery, type Params, type QueryFacts } from '../routes/query-params.js';
import { registeredBy, type RouteSpec } from '../routes/table.js';
import type { Tenant, TenantDirectory } from '../tenants/model.js';
import { tenantGate, type Tenancy, type TenancySettings } from '../tenants/tenancy.js';
import { contentEncodingRefusal, upstreamHeaders } from '../upstream/upstream-headers.js';
import type { ProxyRequest, UpstreamProxy } from '../upstream/proxy.js';
import type { Exchange } from './exchange.js';
import { laneOf } from './lane.js';

/** The settings the request path reads, resolved from the configuration once (pipelineSettings). */
export interface PipelineSettings {
  readonly longPoll: RawConfig['server']['longPoll'];
  /** A forwarded request's timeout, unless it is a parked poll. */
  readonly upstreamTimeoutMs: number;
  readonly identityMode: RawConfig['upstreamIdentity']['mode'];
  /** Send the tenant id to every broker, not only to tenancy-aware ones. */
  readonly tenantHeader: boolean;
  readonly accessLog: boolean;
  readonly tenancy: TenancySettings;
  readonly trustedProxies: readonly string[];
  /** The declared query parameters of the routes `queryAllow` extends, by route name (the others use their own). */
  readonly queryParams: ReadonlyMap<string, Params>;
  readonly bodyLimitBytes: number;
  readonly bodyBudget: RawConfig['server']['bodyBudget'];
  readonly lingeringClose: LingerBounds;
  /** Relay a client's `baggage` header to the broker. */
  readonly forwardBaggage: boolean;
}

export function pipelineSettings(config: RawConfig): PipelineSettings {
  return {
    longPoll: config.server.longPoll,
    upstreamTimeoutMs: config.upstream.requestTimeoutMs,
    identityMode: config.upstreamIdentity.mode,
    tenantHeader: config.upstreamIdentity.tenantHeader,
    accessLog: config.log.accessLog,
    tenancy: config.auth,
    trustedProxies: config.server.trustedProxies,
    queryParams: new Map(Object.entries(config.queryAllow).map(([route, extra]) => [route, declaredParams(route, extra)])),
    bodyLimitBytes: config.server.bodyLimitBytes,
    bodyBudget: config.server.bodyBudget,
    lingeringClose: config.server.lingeringClose,
    forwardBaggage: config.tracing.forwardBaggage,
  };
}

/** Everything the pipeline talks to, and its resolved settings; app.ts builds it. */
export interface PipelineDeps {
  readonly settings: PipelineSettings;
  readonly routes: RouteMatcher;
  readonly tenants: TenantDirectory;
  /** Storage gate (docs/limits.md): true while the tenant is over its plan's storage. */
  readonly storageBlocked: (tenantId: string) => boolean;
  /** The global verifier and each tenant's own (tenants with their own identity provider). */
  readonly verifiers: TenantVerifiers;
  /** Tenant API keys (`qe_…` bearer credentials), verified instead of a token's signature. */
  readonly apiKeys: TokenVerifier;
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
  /** Traces of the edge's own work; null when off (no per-request cost). */
  readonly tracing: Tracing | null;
}

/** What the stages talk to: the deps, and what the pipeline builds from them once. */
export interface Parts extends PipelineDeps {
  readonly tenancy: Tenancy;
  readonly clientAddresses: ClientAddresses;
  readonly bodyBudget: BodyBudget;
  /** The minimum rate of bodies being received, buffered or streamed. */
  readonly bodyPace: BodyPace;
  readonly headsInFlight: HeadsInFlight;
}

export const CONTINUE = null;
export const ANSWERED = 'answered';
export type StageResult = EdgeError | typeof CONTINUE | typeof ANSWERED;
export type Stage = (x: Exchange, p: Parts) => StageResult | Promise<StageResult>;

/**
 * Node keeps the first of duplicated Host/Authorization headers; an edge must not guess which one
 * a broker or an intermediary would read, so such requests are refused outright.
 */
export function singleHeaders(x: Exchange): StageResult {
  const dup = duplicatedSingleton(x.req.rawHeaders);
  if (dup === null) return CONTINUE;
  return dup === 'authorization'
    ? edgeError('unauthorized', 'more than one Authorization header')
    : edgeError('invalid_request', `more than one ${dup} header`);
}

export function hostTenant(x: Exchange, p: Parts): StageResult {
  const named = p.tenancy.byHost(x.transport.authority(x.req));
  if (isEdgeError(named)) return named;
  x.host = named.host;
  x.hostTenant = named.tenant;
  return CONTINUE;
}

/**
 * Before authentication: preflights carry no token. On a host no tenant lists, the default
 * tenant's policy answers here and the acting tenant's is checked once the token named it
 * (actingTenant; docs/browser.md).
 */
export function cors(x: Exchange, p: Parts): StageResult {
  const { req } = x;
  x.openTenant = p.tenancy.orDefault(x.hostTenant);
  const origin = singleValue(req.headers.origin);
  x.origin = origin;
  if (origin === undefined) return CONTINUE;
  const policy = x.openTenant?.cors;
  const preflightMethod = singleValue(req.headers['access-control-request-method']);
  if (req.method === 'OPTIONS' && preflightMethod !== undefined) {
    const verdict = policy ? preflightVerdict(policy, origin, preflightMethod, singleValue(req.headers['access-control-request-headers'])) : null;
    if (!verdict?.allowed) return edgeError('forbidden', 'origin not allowed');
    x.status = 204;
    x.res.writeHead(204, { ...verdict.headers, 'x-request-id': x.id });
    x.res.end();
    return ANSWERED;
  }
  if (!policy?.allows(origin)) return edgeError('forbidden', 'origin not allowed');
  Object.assign(x.headers, actualResponseHeaders(origin));
  return CONTINUE;
}

/** Normalised once; unknown, operator-only and blocked routes are never forwarded. */
export function route(x: Exchange, p: Parts): StageResult {
  const target = normalizeTarget(x.req.url ?? '/');
  if (isEdgeError(target)) return target;
  const match = p.routes.match(x.req.method ?? 'GET', target.path);
  if (match?.route.exposure !== 'tenant') return edgeError('route_not_found');
  x.target = target;
  x.params = match.params;
  x.route = match.route;
  return CONTINUE;
}

/** Public routes (the health check) are answered by the edge for the host's (or default) tenant, billed to none. */
export function publicTenant(x: Exchange): StageResult {
  return x.openTenant ? CONTINUE : edgeError('route_not_found');
}

export async function publicRateLimit(x: Exchange, p: Parts): Promise<StageResult> {
  return (await p.clientLimits.publicRequest(clientOf(x, p))) ?? CONTINUE;
}

export function noBody(x: Exchange): StageResult {
  return x.transport.bodyFollows(x.req) ? edgeError('invalid_request', 'this route takes no body') : CONTINUE;
}

const HEALTHY = Buffer.from('{"status":"healthy"}');
const NO_RESULTS = Buffer.from('[]');

/** Writes a `200` JSON answer the edge makes itself. */
function answer(x: Exchange, body: Buffer): typeof ANSWERED {
  x.status = 200;
  x.res.writeHead(200, { ...x.headers, 'content-type': 'application/json', 'content-length': String(body.length), 'cache-control': 'no-store' });
  x.res.end(body);
  x.answeredBytes = body.length;
  return ANSWERED;
}

/** Only `status`, from the active health checks of the tenant's brokers: their own /health is never relayed to anonymous callers. */
export function health(x: Exchange, p: Parts): StageResult {
  return p.proxy.reachable(x.openTenant!) ? answer(x, HEALTHY) : edgeError('no_upstream');
}

/**
 * The host picks whose keys verify the token (tenants/tenancy.ts). Signature checks are behind the
 * per-client gate (limits/client-limits.ts): 429 before the check for an identity that failed too
 * often from this address, or an address over its checks per second. A cache hit never gets there.
 */
export function authenticate(x: Exchange, p: Parts): StageResult | Promise<StageResult> {
  const token = bearerToken(x.req.headers.authorization);
  if (token === undefined) return edgeError('unauthorized', 'missing bearer token');
  if (isEdgeError(token)) return token;
  const candidate = p.tenancy.candidate(x.hostTenant, token);
  const { tenant } = candidate;
  // A key names its tenant in its record; whether it fits the host is judged as a token's claim is.
  const verifier = isApiKey(token) ? p.apiKeys : candidate.verifier;
  // A cached token stays synchronous: no promise for the common case.
  const cached = verifier.cached(token);
  if (cached !== undefined) return authenticated(x, cached, tenant);
  // Checked after the cache: a token that is there was checked before it was verified.
  if (!wellFormedToken(token)) return edgeError('unauthorized', 'malformed authorization header');
  const since = x.trace === null ? 0 : performance.now();
  return verifier.verify(token, p.clientLimits.signatureGate(clientOf(x, p), token), x.trace ?? undefined).then((v) => {
    x.trace?.phase(verifier === p.apiKeys ? 'auth.api_key' : 'auth.jwt', since, { 'queen.auth.ok': !isEdgeError(v) });
    return authenticated(x, v, tenant);
  });
}

function authenticated(x: Exchange, verified: Identity | EdgeError, tenant: Tenant | EdgeError): StageResult {
  if (isEdgeError(verified)) return verified;
  x.identity = verified;
  if (isEdgeError(tenant)) return tenant;
  x.candidate = tenant;
  return CONTINUE;
}

/** The token must fit the candidate; from here refusals are metered for the tenant, whose own CORS policy must allow the origin. */
export function actingTenant(x: Exchange, p: Parts): StageResult {
  const tenant = x.candidate as Tenant;
  const unfit = p.tenancy.fits(tenant, x.identity!.tenant);
  if (unfit) return unfit;
  x.tenant = tenant;
  if (x.origin !== undefined && tenant !== x.openTenant && !tenant.cors.allows(x.origin)) {
    withoutActualResponseHeaders(x.headers);
    return edgeError('forbidden', 'origin not allowed');
  }
  return CONTINUE;
}

/** The token's role set against the route's access set. */
export function authorize(x: Exchange): StageResult {
  return isAllowed(x.identity!.roles, x.route!.access) ? CONTINUE : roleRefusal(x.identity!);
}

/** Suspension and plan features, then whether the tenant's brokers register the route at all. */
export function gates(x: Exchange): StageResult {
  const tenant = x.tenant!;
  const r = x.route!;
  const gated = tenantGate(tenant, r.feature);
  if (gated !== null) return gated;
  return registeredBy(r, tenant.brokerVersion) ? CONTINUE : edgeError('route_not_found', `route not registered by broker ${tenant.brokerVersion}`);
}

/** Read against the route's declared parameters, capped; the broker gets the edge's rebuild of it. */
export function query(x: Exchange, p: Parts): StageResult {
  const r = x.route!;
  const params = p.settings.queryParams.get(r.name) ?? declaredParams(r.name);
  const q = readQuery(x.target.query, { params, longPoll: r.longPoll, maxBatch: x.tenant!.limits.maxBatch, longPollSettings: p.settings.longPoll });
  if (isEdgeError(q)) return q;
  x.query = q;
  // The broker reads the forwarded value: `true` makes its pop commit (ack) what it delivers.
  x.autoAck = r.meter === 'pop' && q.values.get('autoAck') === 'true';
  return CONTINUE;
}

export function contentEncoding(x: Exchange): StageResult {
  return contentEncodingRefusal(x.req.headers) ?? CONTINUE;
}

/**
 * Refusals this instance already knows (deny cache) come before the body, so a throttled tenant's
 * upload is neither read nor, with Expect: 100-continue, sent (docs/limits.md).
 */
export function preAdmit(x: Exchange, p: Parts): StageResult {
  const declared = x.transport.declaredLength(x.req);
  const pre = p.limiter.preAdmit({ tenant: x.tenant!, messages: 0, ingressBytes: declared ?? 0, parkedPoll: x.query!.wait });
  if (pre?.release) x.holdHead(pre.release);
  return pre?.refusal ? x.limited(pre as typeof pre & { refusal: EdgeError }) : CONTINUE;
}

/** The request rate charged from the head, locally: no more heads in flight than the burst (limits/heads-in-flight.ts). */
export function headsInFlight(x: Exchange, p: Parts): StageResult {
  const tenant = x.tenant!;
  const inFlight = p.headsInFlight.enter(tenant.id, tenant.limits.requestBurst);
  if (inFlight === null) {
    x.endHead();
    x.limit = 'rate_limited';
    return edgeError('rate_limited', 'too many requests in flight for this tenant', { retryAfterSec: 1 });
  }
  x.holdHead(inFlight);
  return CONTINUE;
}

/** Where a request has a body: streamed to the broker (a declared length on a route the proxy does not parse) or read whole. */
export function body(x: Exchange, p: Parts): StageResult | Promise<StageResult> {
  const { req } = x;
  if (!(req.method !== 'GET' && req.method !== 'DELETE') && !x.transport.bodyFollows(req)) return CONTINUE;
  const limit = Math.min(p.settings.bodyLimitBytes, x.tenant!.limits.maxPayloadBytes);
  const declared = x.transport.declaredLength(req);
  if (x.route!.body !== 'stream' || declared === null) return readWhole(x, p, limit, declared);
  if (declared > limit) return bodyTooLarge(limit);
  // Admitted on its declared length (Node's parsers never let more through), but metered as the
  // proxy relays it (bytesIn): a client that stops part way is billed for what the broker got, and
  // a body refused before forwarding for nothing.
  x.bodyLength = declared;
  x.streamed = declared !== 0;
  return CONTINUE;
}

/**
 * A buffered body claims its declared length from its tenant's own budget before it is read, and
 * takes each chunk from the process budget as it comes (body/budget.ts). No body can outgrow a
 * tenant's share, and a length only announced holds no memory.
 */
function readWhole(x: Exchange, p: Parts, limit: number, declared: number | null): StageResult | Promise<StageResult> {
  const budget = p.settings.bodyBudget;
  const bufferLimit = Math.min(limit, budget.perTenantBytes);
  if (declared !== null && declared > bufferLimit) return bodyTooLarge(bufferLimit);
  const account = p.bodyBudget.open(x.tenant!.id);
  x.hold(() => account.close());
  const over = declared === null ? null : account.claim(declared);
  if (over !== null) return x.unread(over);
  sendContinue(x.req, x.res);
  x.linger = x.transport.lingers;
  return readBody(x.req, bufferLimit, { account, pace: p.bodyPace, deadlineMs: budget.deadlineMs }).then((read) => bodyRead(x, p, read));
}

function bodyRead(x: Exchange, p: Parts, read: Buffer | EdgeError): StageResult {
  if (isEdgeError(read)) {
    // A body the edge began to read costs its request, whatever became of it.
    chargeRequest(x.tenant!, p);
    const spent = read.code === 'rate_limited' || read.code === 'edge_overloaded' || read.code === 'request_timeout';
    return spent ? x.unread(read) : read;
  }
  x.closeOnRefusal = false;
  x.body = read;
  x.bytesIn = x.bodyLength = read.length;
  return bodyFacts(x, read);
}

/** Push, transaction and ack bodies: what the edge counts is what the broker will act on (body/facts.ts). */
function bodyFacts(x: Exchange, read: Buffer): StageResult {
  const kind = x.route!.body;
  const parsed = kind === 'push' ? pushFacts(read) : kind === 'transaction' ? transactionFacts(read) : kind === 'ack' ? ackFacts(read) : null;
  if (isEdgeError(parsed)) return parsed;
  if (parsed === null) return CONTINUE;
  x.facts = parsed;
  x.requestMessages = parsed.messages;
  x.requestAcks = parsed.acks;
  const maxBatch = x.tenant!.limits.maxBatch;
  if (kind !== 'ack' && parsed.messages > maxBatch)
    return edgeError('invalid_request', `push of ${parsed.messages} items exceeds the plan's maximum of ${maxBatch}`);
  return CONTINUE;
}

/**
 * Charges the request rate of a request whose body was being read and never came whole: its head
 * was counted in flight locally (heads-in-flight.ts) but never reaches the admit, so this spends it
 * in the shared bucket. Nothing waits on it; its refusal, if any, is for the next requests.
 */
function chargeRequest(tenant: Tenant, p: Parts): void {
  const charged = p.limiter.admit({ tenant, messages: 0, ingressBytes: 0, parkedPoll: false });
  if (charged instanceof Promise) charged.catch((err: unknown) => p.log.warn({ err }, 'charging an unread body failed'));
}

/** Writes refused while recorded storage is over the plan (a transaction that pushes nothing is no write). */
export function storage(x: Exchange, p: Parts): StageResult {
  if (x.route!.body === 'transaction' && (x.facts?.messages ?? 0) === 0) return CONTINUE;
  return p.storageBlocked(x.tenant!.id) ? edgeError('storage_quota_exceeded') : CONTINUE;
}

/** Limits and quotas: one decision, at most one Redis round trip; sync when no I/O is needed. */
export function admit(x: Exchange, p: Parts): StageResult | Promise<StageResult> {
  const since = x.trace === null ? 0 : performance.now();
  const admitted = p.limiter.admit({ tenant: x.tenant!, messages: x.facts?.messages ?? 0, ingressBytes: x.bodyLength, parkedPoll: x.query!.wait });
  if (!(admitted instanceof Promise)) return admission(x, p, admitted);
  // Only an admit that waits (Redis) is a span: a local one takes microseconds.
  return admitted.then((a) => {
    x.trace?.phase('limiter.admit', since, { 'queen.limit': a.refusal ? a.refusal.code : 'admitted' });
    return admission(x, p, a);
  });
}

function admission(x: Exchange, p: Parts, a: Admission): StageResult {
  x.endHead();
  if (a.refusal) return x.limited(a as Admission & { refusal: EdgeError });
  if (a.headers) Object.assign(x.headers, a.headers);
  x.limit = 'admitted';
  if (a.release) x.hold(a.release);
  if (x.streamed) {
    sendContinue(x.req, x.res);
    // From here undici reads the body; what it leaves is discarded (transport.discardUnread).
    x.closeOnRefusal = false;
  }
  if (x.query!.wait) {
    const tenantId = x.tenant!.id;
    p.metrics.parked(tenantId, 1);
    x.hold(() => p.metrics.parked(tenantId, -1));
  }
  return CONTINUE;
}

/**
 * An ack batch of no acknowledgements is answered here, as the seed's array in request order (an
 * empty one): broker 0.15.1 never answers it, so the client would wait for the upstream timeout.
 */
export function emptyBatch(x: Exchange): StageResult {
  return x.facts?.acks === 0 ? answer(x, NO_RESULTS) : CONTINUE;
}

/**
 * Picks a broker for the lane, forwards and relays (upstream/proxy.ts). Metering and lease
 * learning read the relayed answers of pushes, pops, acks and transactions as they pass.
 */
export function forward(x: Exchange, p: Parts): StageResult | Promise<StageResult> {
  if (clientGone(x.res)) return ANSWERED;
  if (x.streamed) return relayStreamed(x, p);
  const auth = brokerAuthorization(x, p);
  return auth instanceof Promise ? auth.then((a) => relay(x, p, a)) : relay(x, p, auth);
}

/** The tracing decision, then the broker's Authorization: a promise only when a token is minted. */
function brokerAuthorization(x: Exchange, p: Parts): string | null | Promise<string> {
  // Decided here, with the tenant's ratio: the broker must get this decision in traceparent.
  x.trace?.decide(x.tenant!.traceRatio);
  return upstreamAuthorization(x.identity, x.tenant!, p);
}

function relay(x: Exchange, p: Parts, authorization: string | null): Promise<StageResult> {
  return p.proxy.forward(x.res, x, x.tenant!, upstreamRequest(x, p, authorization)).then(answered);
}

const answered = (refusal: EdgeError | null): StageResult => refusal ?? ANSWERED;

async function relayStreamed(x: Exchange, p: Parts): Promise<StageResult> {
  let paced: PacedBody | null = null;
  try {
    const request = upstreamRequest(x, p, await brokerAuthorization(x, p));
    paced = paceStreamed(x, p, request.body as Readable);
    return answered(await p.proxy.forward(x.res, x, x.tenant!, request));
  } finally {
    if (paced !== null) p.bodyPace.unwatch(paced);
    // The exchange is over: what undici did not read of the body is discarded, so the request can end.
    x.transport.discardUnread(x.req);
  }
}

/**
 * A streamed upload holds a broker connection (and its tenant's place on a shared broker) while
 * it comes: it keeps the body pace while the edge reads it, or the request is cut, connection (h1)
 * or stream (h2) and upstream request alike (docs/limits.md, "Bodies in flight").
 */
function paceStreamed(x: Exchange, p: Parts, body: Readable): PacedBody {
  const { req, transport } = x;
  const base = transport.bodyReceived(req, body);
  const paced: PacedBody = {
    paceFrom: p.bodyPace.now(),
    paceBase: base,
    // The listener's requestTimeoutMs bounds a streamed request as a whole.
    paceDeadline: Infinity,
    paceBytes: () => transport.bodyReceived(req, body),
    paceReading: () => transport.bodyReading(req),
    paceCut: () => {
      if (!x.res.headersSent) {
        x.status = 408;
        x.code = 'request_timeout';
      }
      transport.cut(req);
    },
  };
  p.bodyPace.watch(paced);
  return paced;
}

function upstreamRequest(x: Exchange, p: Parts, authorization: string | null): ProxyRequest {
  const { req, tenant, route: r, query: q } = x as Exchange & { tenant: Tenant; route: RouteSpec; query: QueryFacts };
  const s = p.settings;
  const timeout = q.wait ? q.timeoutMs + s.longPoll.slackMs : s.upstreamTimeoutMs;
  return {
    method: req.method as 'GET',
    path: q.forward === '' ? x.target.path : `${x.target.path}?${q.forward}`,
    headers: upstreamHeaders(req.headers, {
      clientIp: x.peer ?? '',
      proto: x.transport.isTls(req) ? 'https' : 'http',
      host: x.hostTenant ? x.host : null,
      requestId: x.id,
      trustProxy: p.clientAddresses.trusts(x.peer),
      authorization,
      tenantHeader: s.tenantHeader || tenant.tenancyAwareBrokers ? tenant.id : null,
      contentLength: x.body || x.streamed ? x.bodyLength : null,
      baggage: s.forwardBaggage,
    }),
    body: x.streamed ? x.transport.streamedBody(req) : x.body,
    headersTimeoutMs: timeout,
    bodyTimeoutMs: timeout,
    capture: r.meter !== 'none',
    responseHeaders: x.headers,
    lane: laneOf(r, x.params, q, x.facts),
    parked: q.wait,
    learnsLease: r.lane === 'pop-queue' || r.lane === 'pop-ns',
  };
}

function upstreamAuthorization(identity: Identity | null, tenant: Tenant, p: Parts): string | null | Promise<string> {
  if (identity === null) return null;
  const mode = p.settings.identityMode;
  // An API key's identity carries no token: the key itself never leaves the edge.
  if (mode === 'passthrough') return identity.token === '' ? null : `Bearer ${identity.token}`;
  if (mode === 'mint' && p.minter) return p.minter.authorizationFor(identity, tenant.id);
  return null;
}

/** The client address the per-client limits count (behind trusted proxies, their X-Forwarded-For). */
function clientOf(x: Exchange, p: Parts): string {
  return clientKey(p.clientAddresses.of(x.peer, x.req.headers['x-forwarded-for']));
}
