/**
 * Forwards one request to one broker and relays the answer (docs/architecture.md).
 *
 * Uses undici's dispatch() with a handler in undici's own (non-wrapped) callback style: no stream
 * pipeline, no header object parsed by undici, backpressure by returning false from onData
 * (stream.pipeline halved throughput on Node 20 when measured: docs/decisions/0001-undici-dispatch-not-http-proxy.md).
 */
import { performance } from 'node:perf_hooks';
import type { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { edgeError, type EdgeError } from '../errors.js';
import type { EdgeResponse } from '../listen/servers.js';
import { clientGone } from '../listen/transport.js';
import { openAnswerMeter, type AnswerMeter } from '../metering/answer-meter.js';

/** What can go wrong upstream, as a typed fact (never a matched message). */
export type UpstreamFailure = 'connect' | 'reset' | 'timeout' | 'protocol' | 'client_aborted';

export interface ForwardRequest {
  readonly method: Dispatcher.HttpMethod;
  /** Canonical path with query. */
  readonly path: string;
  readonly headers: Record<string, string>;
  /** A buffered body, or the client's request streamed through (its length declared in `headers`). */
  readonly body: Buffer | Readable | null;
  readonly headersTimeoutMs: number;
  readonly bodyTimeoutMs: number;
  /** Meter the response body as it is relayed (pops, pushes, acks, transactions: metering and lease learning). */
  readonly capture: boolean;
  /** Headers the edge adds to the response (CORS, RateLimit, X-Request-Id). */
  readonly responseHeaders: Readonly<Record<string, string>> | null;
}

/**
 * Facts of the exchange, written where they happen (status as the head goes out, bytes as they are
 * relayed, upstream time before the response ends), so whatever reads them on the response's
 * finish or close sees them, whichever event loses the race with the forwarding promise.
 */
export interface RelayRecord {
  /** Status relayed to the client; 0 while no response started. */
  status: number;
  /** Body bytes relayed to the client. */
  bytesOut: number;
  /**
   * Request body bytes written to the broker, added to as a streamed body is relayed (a buffered
   * body is counted by the caller, which read it whole).
   */
  bytesIn: number;
  /** Time from dispatch to the last relayed byte, summed over attempts (ms). */
  upstreamMs: number;
}

export interface ForwardResult {
  /** Status relayed to the client; 0 when the response never started. */
  status: number;
  /** A byte of the request reached a socket: retrying elsewhere could duplicate it. */
  sent: boolean;
  failure: UpstreamFailure | null;
  /** What read the response body as it passed (status 200/201 only); its end() gives the facts. */
  meter: AnswerMeter | null;
  /** When the response head came (performance.now()); 0 while none did. A parked poll's time at the broker ends here. */
  headersAt: number;
}

/** Response headers the edge never relays: hop-by-hop (RFC 9110 §7.6.1), h2-illegal, and ones it owns. */
const DROPPED_RESPONSE_HEADERS: ReadonlySet<string> = new Set([
  'connection',
  'http2-settings',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'x-request-id',
]);

const CONNECT_CODES: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);

/** The one mapping from transport errors to failure kinds (as Caddy's statusError does). */
export function classifyUpstreamError(err: unknown): UpstreamFailure {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return 'reset';
  if (CONNECT_CODES.has(code)) return 'connect';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return 'timeout';
  if (code === 'UND_ERR_ABORTED') return 'client_aborted';
  if (code.startsWith('HPE_') || code === 'UND_ERR_RES_CONTENT_LENGTH_MISMATCH' || code === 'UND_ERR_INFO') return 'protocol';
  return 'reset';
}

/** The refusal a client gets for a failure that happened before its response started. */
export function failureError(failure: UpstreamFailure): EdgeError {
  return failure === 'timeout' ? edgeError('upstream_timeout') : edgeError('bad_gateway');
}

class ClientAbort extends Error {
  readonly code = 'UND_ERR_ABORTED';
}

/**
 * Sends `req` on `pool` and streams the answer into `res`. Resolves once the exchange is over,
 * never rejects. When the response has not started and the result has a failure, `res` is
 * untouched so the caller can retry or render an error; once it started, a failure destroys `res`.
 * Status, bytes and upstream time also go into `rec` as they happen.
 */
export function forwardOnce(pool: Dispatcher, req: ForwardRequest, res: EdgeResponse, rec: RelayRecord): Promise<ForwardResult> {
  // A client that left before this point already emitted 'close': nothing to send upstream.
  if (clientGone(res)) return Promise.resolve({ status: 0, sent: false, failure: 'client_aborted', meter: null, headersAt: 0 });
  return new Promise<ForwardResult>((resolve) => {
    pool.dispatch(
      {
        method: req.method,
        path: req.path,
        headers: req.headers,
        body: req.body,
        headersTimeout: req.headersTimeoutMs,
        bodyTimeout: req.bodyTimeoutMs,
        // Never let undici replay a request on another connection: nothing is retried once sent (docs/architecture.md).
        idempotent: false,
      },
      new Relay(req, res, rec, resolve),
    );
  });
}

/**
 * One attempt's handler, in undici's callback style: relays the broker's answer into `res` and
 * settles the result once. One object per attempt, its methods shared (no closure per callback).
 */
class Relay implements Dispatcher.DispatchHandler {
  private readonly result: ForwardResult = { status: 0, sent: false, failure: null, meter: null, headersAt: 0 };
  private readonly sentAt = performance.now();
  private abortUpstream: ((err: Error) => void) | null = null;
  private resumeUpstream: (() => void) | null = null;
  private finished = false;
  private clientLeft = false;
  /**
   * A streamed body is metered as undici writes it to the broker's socket, so an upload cut short
   * counts what the broker got, not what the client declared. Set for streamed bodies only.
   */
  readonly onBodySent: ((sent: number | Uint8Array) => void) | undefined;

  constructor(
    private readonly req: ForwardRequest,
    private readonly res: EdgeResponse,
    private readonly rec: RelayRecord,
    private readonly resolve: (r: ForwardResult) => void,
  ) {
    // undici passes the chunk; its typings say a size.
    this.onBodySent =
      req.body !== null && !Buffer.isBuffer(req.body)
        ? (sent) => {
            rec.bytesIn += typeof sent === 'number' ? sent : sent.byteLength;
          }
        : undefined;
    res.on('close', this.onClientClose);
  }

  /** Runs before the response ends, so the upstream time is in `rec` before finish/close fire. */
  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    this.rec.upstreamMs += performance.now() - this.sentAt;
    this.res.removeListener('close', this.onClientClose);
    this.resolve(this.result);
  }

  private readonly onClientClose = (): void => {
    // writableEnded, not writableFinished: an h2 stream reset sets writableFinished before 'close'.
    // An answer ended before the broker's head came was the edge's own (an h2 body deadline's
    // 408): the client's doing, which must not count against the broker's health.
    if (this.finished || (this.res.writableEnded && this.result.status !== 0)) return;
    this.clientLeft = true;
    this.result.failure = 'client_aborted';
    // An answer being metered (a pop's messages, a push's statuses) is read to its end without
    // relaying it: the broker already acted on the request, and metering counts what it did, so a
    // client cannot take most of a batch and leave before the last byte to make it free.
    if (this.result.meter !== null) this.resumeUpstream?.();
    else this.abortUpstream?.(new ClientAbort('client disconnected'));
  };

  onConnect(abort: (err?: Error) => void): void {
    this.abortUpstream = abort;
    this.result.sent = true;
    if (this.clientLeft) abort(new ClientAbort('client disconnected'));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (this.clientLeft) return false;
    const { headers, encoding, announcedBody } = relayedHeaders(statusCode, rawHeaders, this.req.responseHeaders);
    const res = this.res;
    this.result.headersAt = performance.now();
    this.result.status = this.rec.status = statusCode;
    if (statusCode === 204) {
      // Seed: an empty pop is a bodiless 204. Relay exactly that, whatever the broker sent,
      // and if it announced a body, drop its connection so stray bytes cannot poison it.
      this.finish();
      res.writeHead(204, headers);
      res.end();
      // Returning true keeps the parser running so the exchange completes and the connection
      // goes back to the pool (onData/onComplete ignore it, as finished is set).
      if (announcedBody) this.abortUpstream?.(new Error('204 with a body'));
      return true;
    }
    res.writeHead(statusCode, headers);
    if (this.req.capture && (statusCode === 200 || statusCode === 201)) {
      const meter = openAnswerMeter(encoding);
      meter.onDrain(resume);
      this.result.meter = meter;
    }
    this.resumeUpstream = resume;
    res.on('drain', resume);
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.finished) return false;
    // Paced by the slower of the client and the meter (a decoder may fall behind).
    const meter = this.result.meter;
    const metered = meter === null || meter.write(chunk);
    if (this.clientLeft) return metered;
    this.rec.bytesOut += chunk.length;
    return (this.res as NodeJS.WritableStream).write(chunk) && metered;
  }

  onComplete(): void {
    if (this.finished) return;
    this.finish();
    if (!this.clientLeft) this.res.end();
  }

  onError(err: Error): void {
    if (this.finished) return;
    this.result.failure = this.clientLeft ? 'client_aborted' : classifyUpstreamError(err);
    // Only an answer read for a client that left is still metered (from what arrived).
    if (!this.clientLeft) {
      this.result.meter?.discard();
      this.result.meter = null;
    }
    this.finish();
    // Once the head went out, a client can only learn of a broken body by a broken stream.
    if (this.result.status !== 0 && !this.res.writableEnded) this.res.destroy();
  }
}

/**
 * The broker's response head as relayed, as the flat [name, value, …] list writeHead takes as it
 * is (an object would be built here and walked again by Node): hop-by-hop and edge-owned fields
 * dropped, repeats kept, the edge's own headers (`own`) last and in place of the broker's. Node
 * keeps a list's repeats only while no header was set on the response before (it then sets each
 * pair, the last repeat winning): nothing sets one on a response that is relayed (the one
 * setHeader, transport's closeAfterResponse, is for refusals).
 */
function relayedHeaders(
  statusCode: number,
  rawHeaders: Buffer[],
  own: Readonly<Record<string, string>> | null,
): { headers: string[]; encoding: string | null; announcedBody: boolean } {
  const headers: string[] = [];
  let announcedBody = false;
  let encoding: string | null = null;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toString('latin1').toLowerCase();
    if (name === 'content-encoding') encoding = rawHeaders[i + 1]!.toString('latin1');
    if (DROPPED_RESPONSE_HEADERS.has(name) || name.startsWith('access-control-')) {
      if (name === 'transfer-encoding') announcedBody = true;
      continue;
    }
    const value = rawHeaders[i + 1]!.toString('latin1');
    if (name === 'content-length' && statusCode === 204) {
      if (value !== '0') announcedBody = true;
      continue;
    }
    if (own !== null && Object.hasOwn(own, name)) continue;
    headers.push(name, value);
  }
  if (own !== null) for (const name in own) headers.push(name, own[name]!);
  return { headers, encoding, announcedBody };
}
