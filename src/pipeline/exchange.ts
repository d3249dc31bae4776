/**
 * One exchange per request (docs/architecture.md, "The request path"): flat fields, each written
 * by one stage (named beside it) or by the proxy, and the releases of whatever the request holds.
 * Whoever acquires a resource (a head in flight, a parked slot, the parked gauge, body bytes)
 * registers its release with hold() where it acquires it; end() runs every release exactly once,
 * however the request ended.
 */
import { performance } from 'node:perf_hooks';
import type { Identity } from '../auth/jwt.js';
import type { BodyFacts } from '../body/facts.js';
import type { EdgeError } from '../errors.js';
import type { Admission } from '../limits/limiter.js';
import type { EdgeRequest, EdgeResponse } from '../listen/servers.js';
import { acceptableRequestId, DRAIN_MAX_BYTES, expectsContinue, transportOf, type Transport } from '../listen/transport.js';
import { MeteredExchange, type UsageRecorder } from '../metering/recorder.js';
import type { LimitOutcome } from '../observability/metrics.js';
import type { RequestTrace } from '../observability/tracing.js';
import type { NormalizedTarget } from '../routes/match.js';
import type { QueryFacts } from '../routes/query-params.js';
import type { Tenant } from '../tenants/model.js';
import type { ProxyExchange } from '../upstream/proxy.js';
import { newRequestId } from './request-id.js';

export class Exchange extends MeteredExchange<Tenant> implements ProxyExchange {
  readonly id: string;
  /** What differs between h1 and h2 for this request (listen/transport.ts). */
  readonly transport: Transport;
  /** Stopwatch start for the latency histograms (performance.now(): monotonic, sub-millisecond). */
  readonly startedAt = performance.now();
  /** Headers the edge adds to whatever answer goes out (X-Request-Id, CORS, RateLimit): stages add, the answer reads. */
  readonly headers: Record<string, string>;
  /**
   * The socket peer's address, read when the request arrives: an h2 stream loses its session (and
   * so its socket) once closed, before the access line is written.
   */
  readonly peer: string | undefined;
  /** The body of the edge's own answer (a refusal, /health), in bytes: with a relayed body's bytesOut, what the client received. */
  answeredBytes = 0;
  /** hostTenant: the host named, without port, and the tenant listing it. */
  host = '';
  hostTenant: Tenant | undefined = undefined;
  /** cors: the Origin sent once (undefined without), and the tenant whose policy answers before a token names one. */
  origin: string | undefined = undefined;
  openTenant: Tenant | undefined = undefined;
  /** route: the normalised target and the route's path parameters (the route itself: MeteredExchange.route). */
  target: NormalizedTarget = NO_TARGET;
  params: Readonly<Record<string, string | undefined>> = NO_PARAMS;
  /** authenticate: the verified token, and the tenant it was verified for (an EdgeError when none). */
  identity: Identity | null = null;
  candidate: Tenant | EdgeError | null = null;
  /** query */
  query: QueryFacts | null = null;
  /** body: the body read whole (null when streamed or none), whether it is streamed, what it says, and its length as admitted and forwarded. */
  body: Buffer | null = null;
  streamed = false;
  facts: BodyFacts | null = null;
  bodyLength = 0;
  /** proxy: the broker of the last attempt; dispatch to last relayed byte (ms). */
  broker: string | null = null;
  upstreamMs = 0;
  /** The request's spans while tracing is on (observability/tracing.ts); null when it is off. */
  trace: RequestTrace | null = null;
  /** preAdmit, headsInFlight, admit: the limiter's decision; null when it was not consulted. */
  limit: LimitOutcome = null;
  /** A refusal closes the connection (h1) or stream (h2) instead of draining the unread body: see refuse(). */
  closeOnRefusal: boolean;
  /** A close on refusal reads on and discards for a while (lingering close): h1 only, and not for refusals of the bytes or time a body takes. */
  linger: boolean;
  done = false;
  /** Releases still to run, last acquired first. */
  readonly #releases: (() => void)[] = [];
  /** What the request's head holds (its pre-admission, its place in flight) until admit, or the end. */
  #head: (() => void)[] | null = null;

  constructor(
    readonly req: EdgeRequest,
    readonly res: EdgeResponse,
    readonly startMs: number,
    recorder: UsageRecorder,
  ) {
    super(recorder);
    this.id = acceptableRequestId(req.headers['x-request-id']) ?? newRequestId();
    this.headers = { 'x-request-id': this.id };
    this.peer = req.socket?.remoteAddress;
    const t = transportOf(req);
    this.transport = t;
    this.closeOnRefusal = t.bodyFollows(req) && !cheapToDrain(t, req);
    // A body awaited with 100-continue is not coming until invited: nothing to linger for yet.
    this.linger = t.lingers && !expectsContinue(req);
  }

  /**
   * Registers `release` to run once, when the exchange ends; an exchange already ended (a client
   * gone meanwhile) runs it at once. No wrapper per release: each runs exactly once from here.
   */
  hold(release: () => void): void {
    if (this.done) release();
    else this.#releases.push(release);
  }

  /** Like hold(), for what the head holds: released by endHead() (at admit), or at the end. */
  holdHead(release: () => void): void {
    if (this.done) release();
    else if (this.#head === null) this.#head = [release];
    else this.#head.push(release);
  }

  /** Ends the head's holds (headsInFlight, preAdmit): at admit, or at the end; once. */
  endHead(): void {
    const head = this.#head;
    if (head === null) return;
    this.#head = null;
    for (let i = head.length - 1; i >= 0; i--) head[i]!();
  }

  /** The request is over: every release still held runs (once). */
  end(): void {
    this.done = true;
    this.endHead();
    for (let i = this.#releases.length - 1; i >= 0; i--) this.#releases[i]!();
    this.#releases.length = 0;
  }

  /** A refusal for the bytes or the time a body takes: the connection is closed without reading on. */
  unread(err: EdgeError): EdgeError {
    this.closeOnRefusal = true;
    this.linger = false;
    this.transport.dropAfterResponse(this.res);
    return err;
  }

  /** A limiter refusal, with its RateLimit headers and outcome recorded. */
  limited(admission: Admission & { readonly refusal: EdgeError }): EdgeError {
    if (admission.headers) Object.assign(this.headers, admission.headers);
    this.limit = admission.refusal.code;
    return admission.refusal;
  }
}

/** The request's server span is told how it ended (observability/tracing.ts). */
export function endTrace(x: Exchange, t: RequestTrace): void {
  const tenant = x.tenant ?? x.hostTenant;
  t.end({
    method: x.req.method ?? '',
    route: x.route?.name ?? null,
    status: x.status,
    code: x.code,
    tenant: x.tenant?.id ?? null,
    ratio: tenant?.traceRatio ?? null,
    requestId: x.id,
    protocol: x.req.httpVersion,
  });
}

/** Before the route stage (shared: neither is written to). */
const NO_PARAMS: Readonly<Record<string, string | undefined>> = Object.freeze({});
const NO_TARGET: NormalizedTarget = Object.freeze({ path: '/', query: '' });

/** True when a refusal may leave Node to discard the unread body and keep the connection. */
function cheapToDrain(t: Transport, req: EdgeRequest): boolean {
  const n = t.declaredLength(req);
  return n !== null && n <= DRAIN_MAX_BYTES && !expectsContinue(req);
}
