/**
 * What differs between an h1 request and an h2 stream, behind one interface (docs/architecture.md,
 * "Listeners"): whether a body follows the head, its declared length, where the host is named,
 * refusing without reading the rest, a client gone, and handing the body on. The request path asks
 * the request's transport and never tests the protocol itself.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { constants as http2Constants, type ServerHttp2Stream } from 'node:http2';
import { PassThrough, type Readable, type TransformCallback } from 'node:stream';
import type { H2Request, H2Response } from './h2-exchange.js';
import { lingerOnClose, type LingerBounds } from './lingering.js';
import type { EdgeRequest, EdgeResponse } from './servers.js';

export interface Transport {
  /** A body follows the head (of declared length above zero, or of unknown length). */
  bodyFollows(req: EdgeRequest): boolean;
  /** The declared body length; null when it is not known in advance or not one number. */
  declaredLength(req: EdgeRequest): number | null;
  /** The host the request names, as sent (port included); '' without one. */
  authority(req: EdgeRequest): string;
  /** The connection is TLS. */
  isTls(req: EdgeRequest): boolean;
  /** A refused connection can read on and discard what still arrives (lingering.ts): h1 only. */
  readonly lingers: boolean;
  /**
   * The rest of the body will not be read: the connection (h1) or the stream (h2) ends with the
   * answer, lingering on h1 with `linger` bounds. Call before the answer is sent.
   */
  closeAfterResponse(req: EdgeRequest, res: EdgeResponse, linger: LingerBounds | null): void;
  /** A refusal of the bytes or time a body takes: nothing more of it is read, not even to discard it. */
  dropAfterResponse(res: EdgeResponse): void;
  /** The body as the upstream client reads it (and may destroy once sent). */
  streamedBody(req: EdgeRequest): Readable;
  /** Bytes of a streamed body (`body`, from streamedBody) received so far, from some fixed origin: the body pace's measure. */
  bodyReceived(req: EdgeRequest, body: Readable): number;
  /** The streamed body is being read: not while it waits for a broker connection or the broker's own pace, nor once it ended. */
  bodyReading(req: EdgeRequest): boolean;
  /** Stops a streamed body part way: the connection (h1) or the stream (h2) is closed, and with it the upstream request. */
  cut(req: EdgeRequest): void;
  /** The exchange is over: what the upstream client did not read of a streamed body is discarded. */
  discardUnread(req: EdgeRequest): void;
}

/** The transport that carried `req`: the one place the protocol is told apart. */
export function transportOf(req: EdgeRequest): Transport {
  return 'stream' in req ? H2 : H1;
}

/** True once the client's side is gone; h2 responses report it on their stream only. */
export function clientGone(res: EdgeResponse): boolean {
  return 'stream' in res ? res.stream.destroyed : res.destroyed;
}

/** A header's value when it was sent once; undefined when absent or repeated. */
export function singleValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? undefined : v;
}

export function expectsContinue(req: EdgeRequest): boolean {
  const e = req.headers.expect;
  return typeof e === 'string' && e.toLowerCase() === '100-continue';
}

/** Lets a client that asked for it (Expect: 100-continue) send its body: only once the edge will read it. */
export function sendContinue(req: EdgeRequest, res: EdgeResponse): void {
  if (expectsContinue(req) && !res.headersSent) res.writeContinue();
}

/**
 * Unread bodies up to this size are cheaper to discard than a new connection (h1: Node reads and
 * drops them) or a reset stream (h2: the listener reads one it answered before reading it).
 */
export const DRAIN_MAX_BYTES = 64 * 1024;

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A client-sent X-Request-Id is kept when it is short and plain; otherwise undefined. */
export function acceptableRequestId(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' && REQUEST_ID.test(v) ? v : undefined;
}

/** Content-Length or Transfer-Encoding decide; `unknownFollows` is what their absence means. */
function declared(req: EdgeRequest, unknownFollows: boolean): number | null {
  const cl = req.headers['content-length'];
  if (cl === undefined) return req.headers['transfer-encoding'] === undefined && !unknownFollows ? 0 : null;
  const n = Number(cl);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

function overTls(req: EdgeRequest): boolean {
  return (req.socket as { encrypted?: boolean } | null)?.encrypted === true;
}

function follows(req: EdgeRequest, unknownFollows: boolean): boolean {
  const cl = req.headers['content-length'];
  return cl === undefined ? req.headers['transfer-encoding'] !== undefined || unknownFollows : cl !== '0';
}

/**
 * Ends an answered h2 stream whose body will not be read: RST_STREAM(NO_ERROR) tells the client to
 * stop sending (RFC 9113 §8.1). Node frees a closed stream only once its readable side ends, which
 * a body left unread or paused (readBody stops at the limit) never does: the stream and its
 * buffered bytes would stay in the session. The answer and the RST_STREAM are queued already; the
 * rest is discarded.
 */
export function closeAnsweredStream(stream: ServerHttp2Stream): void {
  if (stream.destroyed) return;
  stream.close(http2Constants.NGHTTP2_NO_ERROR);
  stream.destroy();
}

/** The copy of an h2 body handed to undici, counting what passed: an h2 stream keeps no byte count. */
class CountedCopy extends PassThrough {
  received = 0;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    this.received += chunk.length;
    done(null, chunk);
  }
}

const H1: Transport = {
  bodyFollows: (req) => follows(req, false),
  declaredLength: (req) => declared(req, false),
  authority: (req) => singleValue(req.headers.host) ?? '',
  isTls: overTls,
  lingers: true,
  /** The connection is not reused; with `linger`, what still arrives is discarded for a while before it closes. */
  closeAfterResponse(req, res, linger) {
    const h1 = res as ServerResponse;
    if (h1.headersSent) return;
    h1.setHeader('connection', 'close');
    if (linger !== null) lingerOnClose(req as IncomingMessage, linger);
  },
  /**
   * Once the answer is handed to the kernel, the connection is destroyed, before Node's discard of
   * the unread body (it reads on until the connection is closed) takes any of it: a herd of refused
   * uploads would otherwise each have its bytes read, a chunk at a time, for nothing. A client
   * still sending may see a reset instead of the answer.
   */
  dropAfterResponse(res) {
    const socket = (res as ServerResponse).socket;
    if (socket !== null) res.once('finish', () => socket.destroy());
  },
  streamedBody: (req) => req as IncomingMessage,
  // One request at a time is read from an h1 connection: the socket's count is the body's.
  bodyReceived: (req) => req.socket?.bytesRead ?? 0,
  bodyReading(req) {
    const r = req as IncomingMessage;
    return r.readableFlowing === true && !r.readableEnded;
  },
  // The connection goes: the rest of the body could only be read to be discarded.
  cut: (req) => (req as IncomingMessage).destroy(),
  // Node discards what is left of an h1 body.
  discardUnread() {},
};

/**
 * h2 needs no content-length: a stream its HEADERS frame did not end carries a body of unknown
 * length (the h1 chunked case), never "no body", or it would be forwarded without it.
 */
const bodyOnStream = (req: EdgeRequest): boolean => !(req as H2Request).stream.endAfterHeaders;

const H2: Transport = {
  bodyFollows: (req) => follows(req, bodyOnStream(req)),
  declaredLength: (req) => declared(req, bodyOnStream(req)),
  authority: (req) => singleValue(req.headers[':authority'] as string | undefined) ?? singleValue(req.headers.host) ?? '',
  isTls: overTls,
  lingers: false,
  /**
   * Once the answer is out, RST_STREAM(NO_ERROR) tells the client to stop sending (RFC 9113
   * §8.1); without it the unread body fills the stream's window and the stream never closes.
   */
  closeAfterResponse(_req, res) {
    const stream = (res as H2Response).stream;
    res.once('finish', () => closeAnsweredStream(stream));
  },
  // The stream is reset once the answer is out (closeAfterResponse): nothing more is read.
  dropAfterResponse() {},
  /**
   * undici destroys a body stream once it has sent it, which for an h2 request's own stream would
   * also reset the response: it reads a copy of the stream instead. A stream that closes before
   * its body ended fails the copy; one reset with CANCEL or NO_ERROR ends it short, which undici
   * refuses against the declared length. Either way the upstream request is aborted.
   */
  streamedBody(req) {
    const stream = (req as H2Request).stream;
    const copy = new CountedCopy();
    // undici listens while it sends the copy; before (a request queued for a connection) and after
    // (a broker that could not be reached) the failure is only for undici to find.
    copy.on('error', () => {});
    stream.pipe(copy);
    stream.once('close', () => {
      if (!stream.readableEnded) copy.destroy(new Error('request body aborted'));
    });
    return copy;
  },
  bodyReceived: (_req, body) => (body as CountedCopy).received,
  bodyReading(req) {
    const stream = (req as H2Request).stream;
    return stream.readableFlowing === true && !stream.readableEnded;
  },
  cut: (req) => (req as H2Request).stream.close(http2Constants.NGHTTP2_CANCEL),
  /** Node does not discard an h2 body: unread, the stream could not end and close. */
  discardUnread(req) {
    const stream = (req as H2Request).stream;
    stream.unpipe();
    stream.resume();
  },
};
