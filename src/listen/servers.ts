/**
 * The listeners (docs/architecture.md): HTTPS with HTTP/2 by ALPN, an optional plain HTTP listener for
 * deployments behind a TLS-terminating load balancer, and the admin listener. This module owns the
 * socket-level guards (timeouts, header size, malformed input), connection tracking and draining;
 * what a request means is the handlers' business.
 */
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import http2, { type Http2SecureServer, type Http2Session, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import https from 'node:https';
import { Socket, type AddressInfo, type Server as NetServer } from 'node:net';
import type { Duplex } from 'node:stream';
import type { SecureContext, SecureContextOptions } from 'node:tls';
import type { RawConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import { H2Request, H2Response } from './h2-exchange.js';
import { Deadlines } from './deadlines.js';
import { closeAnsweredStream, DRAIN_MAX_BYTES } from './transport.js';
import { CertificateSet, type CertificateExpiry } from './tls.js';

/** A request as either protocol delivers it (h2 on the stream API: h2-exchange.ts). */
export type EdgeRequest = IncomingMessage | H2Request;
/** The response that goes with an EdgeRequest. */
export type EdgeResponse = ServerResponse | H2Response;
/** What serves the requests of one listener. */
export type RequestHandler = (req: EdgeRequest, res: EdgeResponse) => void;
/** What serves a listener that speaks only HTTP/1.1 (the admin listener). */
export type H1Handler = (req: IncomingMessage, res: ServerResponse) => void;

type ServerConfig = RawConfig['server'];

/** Where each listener is bound; null when it is not configured. */
export interface BoundAddresses {
  https: AddressInfo | null;
  http: AddressInfo | null;
  admin: AddressInfo | null;
}

/** The process's listeners, started and stopped together. */
export interface Listeners {
  /** Binds every configured listener (port null = not started; port 0 = ephemeral, for tests). */
  listen(): Promise<BoundAddresses>;
  /** Stops accepting; resolves when all listeners are closed (idle keep-alive connections closed, in-flight requests allowed to finish; after `forceAfterMs` remaining connections are destroyed). */
  close(forceAfterMs?: number): Promise<void>;
  /** Number of open client connections (for drain/metrics). */
  connections(): number;
  /** The HTTPS listener's certificates and their expiry; empty without one. */
  certificates(): CertificateExpiry[];
  /**
   * Serves `certs` from now on (a configuration reload that changed the certificate paths): new
   * handshakes get them, open connections keep theirs; the old set stops being watched.
   */
  replaceCertificates(certs: CertificateSet): void;
}

/** Largest request head accepted on h1 (and header list on h2); bigger gets 431. Node's default, made explicit. */
export const MAX_HEADER_BYTES = 16 * 1024;
/** Concurrent h2 streams served per session: room for a browser's parked polls, bounded against stream floods (Node's default is 2^32-1). */
export const MAX_CONCURRENT_STREAMS = 256;
/**
 * The limit advertised in SETTINGS, above the one served. nghttp2 treats a stream over the
 * advertised limit as a connection error (GOAWAY PROTOCOL_ERROR: every stream of the connection
 * lost); a stream over the served limit is refused alone, with RST_STREAM REFUSED_STREAM, which
 * tells the client it was not processed and may be retried (RFC 9113 §8.7).
 */
const ADVERTISED_CONCURRENT_STREAMS = 2 * MAX_CONCURRENT_STREAMS;
/** Idle time allowed beyond the longest parked poll before a silent connection is dropped. */
const IDLE_MARGIN_MS = 5_000;
/** While closing, how often keep-alive connections that became idle are closed. */
/** Admin connections (probes, scrapes) get this long once traffic has drained. */
const ADMIN_FORCE_AFTER_MS = 1000;
const DRAIN_SWEEP_MS = 100;

/** Socket-level timeouts, all in ms. */
export interface ListenerTimeouts {
  /** Time to receive a request head, from its first byte (slowloris guard); also the TLS handshake bound. */
  headersTimeoutMs: number;
  /** Time to receive the whole request, body included. */
  requestTimeoutMs: number;
  /** Idle time between h1 requests on a keep-alive connection. */
  keepAliveTimeoutMs: number;
  /** Inactivity after which a connection (h1 socket, h2 session) is dropped. */
  idleTimeoutMs: number;
  /** How often Node checks the header and request deadlines. */
  checkIntervalMs: number;
}

/** Derives the listeners' timeouts from `server:`; no timeout is shorter than a parked long poll needs. */
export function listenerTimeouts(server: ServerConfig): ListenerTimeouts {
  const longestPoll = server.longPoll.maxTimeoutMs + server.longPoll.slackMs;
  return {
    headersTimeoutMs: server.headersTimeoutMs,
    // Node's requestTimeout runs from the request's first byte until its body is fully received and is
    // then cleared, so it never cuts a parked poll's response; it only stops a slow upload. Node refuses
    // a headersTimeout above it. h2 streams get the same deadline (h2RequestDeadline).
    requestTimeoutMs: Math.max(server.requestTimeoutMs, longestPoll, server.headersTimeoutMs),
    keepAliveTimeoutMs: server.keepAliveTimeoutMs,
    // A parked poll is silent (no bytes either way) for up to longestPoll.
    idleTimeoutMs: Math.max(longestPoll, server.keepAliveTimeoutMs) + IDLE_MARGIN_MS,
    // Node checks these deadlines on a timer (30 s by default), which would blur a short headersTimeout.
    checkIntervalMs: Math.min(1000, Math.max(100, Math.floor(server.headersTimeoutMs / 2))),
  };
}

/** Creates the configured listeners (not yet bound); loads or generates the TLS certificates first. */
export async function createListeners(server: ServerConfig, handlers: { edge: RequestHandler; admin: H1Handler }, deps: { log: Logger }): Promise<Listeners> {
  const certs = server.https.port === null ? null : await CertificateSet.load(server.https, { log: deps.log });
  return new EdgeListeners(server, handlers, deps.log, certs);
}

/** The h1 knobs Node reads from a server object; Http2SecureServer's HTTP/1.1 fallback takes them only as properties. */
interface Http1Knobs {
  headersTimeout: number;
  requestTimeout: number;
  keepAliveTimeout: number;
  maxHeaderSize: number;
  connectionsCheckingInterval: number;
  timeout: number;
}

type AnyServer = http.Server | https.Server | Http2SecureServer;

interface Entry {
  name: keyof BoundAddresses;
  server: AnyServer;
  host: string;
  port: number;
  /** Raw TCP sockets, tracked for connections() and the forced end of a drain. */
  sockets: Set<Socket>;
}

class EdgeListeners implements Listeners {
  readonly #log: Logger;
  #certs: CertificateSet | null;
  readonly #entries: Entry[] = [];
  readonly #sessions = new Set<ServerHttp2Session>();
  readonly #drainTimeoutMs: number;
  #draining = false;
  #closed: Promise<void> | null = null;

  constructor(config: ServerConfig, handlers: { edge: RequestHandler; admin: H1Handler }, log: Logger, certs: CertificateSet | null) {
    this.#log = log;
    this.#certs = certs;
    this.#drainTimeoutMs = config.drainTimeoutMs;
    const t = listenerTimeouts(config);
    const edge = this.#drainAware(handlers.edge);
    if (certs !== null && config.https.port !== null) {
      this.#add('https', this.#secureServer(config.https, certs, t, edge), config.https.host, config.https.port);
    }
    if (config.http.port !== null) this.#add('http', plainServer(t, edge, log), config.http.host, config.http.port);
    // Expect: 100-continue reaches the pipeline unanswered: it sends 100 only once it will read the
    // body, so a refused client never uploads it (with no listener Node answers 100 at once).
    for (const e of this.#entries) (e.server as http.Server).on('checkContinue', edge);
    if (config.admin.port !== null) this.#add('admin', plainServer(t, this.#drainAware(handlers.admin), log), config.admin.host, config.admin.port);
  }

  async listen(): Promise<BoundAddresses> {
    const results = await Promise.allSettled(this.#entries.map((e) => this.#bind(e)));
    const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) {
      await Promise.all(this.#entries.map((e) => closeServer(e.server)));
      throw failed.reason;
    }
    const bound: BoundAddresses = { https: null, http: null, admin: null };
    for (const e of this.#entries) bound[e.name] = e.server.address() as AddressInfo;
    this.#certs?.watch((options) => this.#serve(options));
    return bound;
  }

  replaceCertificates(certs: CertificateSet): void {
    if (this.#certs === null || this.#draining) {
      certs.close();
      return;
    }
    this.#certs.close();
    this.#certs = certs;
    this.#serve(certs.contextOptions());
    certs.watch((options) => this.#serve(options));
  }

  /** The HTTPS listener's default context from now on. */
  #serve(options: SecureContextOptions): void {
    const server = this.#entries.find((e) => e.name === 'https')!.server as https.Server | Http2SecureServer;
    // Keep the ticket keys so sessions resumed across a reload still skip the full handshake.
    server.setSecureContext({ ...options, ticketKeys: server.getTicketKeys() });
  }

  close(forceAfterMs: number = this.#drainTimeoutMs): Promise<void> {
    this.#closed ??= this.#drain(forceAfterMs);
    return this.#closed;
  }

  connections(): number {
    let n = 0;
    for (const e of this.#entries) if (e.name !== 'admin') n += e.sockets.size;
    return n;
  }

  certificates(): CertificateExpiry[] {
    return this.#certs?.expiries() ?? [];
  }

  async #drain(forceAfterMs: number): Promise<void> {
    this.#draining = true;
    this.#certs?.close();
    // The admin listener closes last: while traffic drains, load balancers must still reach
    // /readyz (503) instead of a refused connection, and /metrics keeps answering.
    const edge = this.#entries.filter((e) => e.name !== 'admin');
    const admin = this.#entries.filter((e) => e.name === 'admin');
    await this.#closeEntries(edge, forceAfterMs, true);
    await this.#closeEntries(admin, ADMIN_FORCE_AFTER_MS, false);
  }

  async #closeEntries(entries: Entry[], forceAfterMs: number, sessions: boolean): Promise<void> {
    const closed = Promise.all(entries.map((e) => closeServer(e.server)));
    // GOAWAY: open streams finish, no new ones; the session closes when the last one ends.
    if (sessions) for (const s of this.#sessions) s.close();
    // Node closes idle h1 connections once, at close(); ones that finish a response later would linger
    // until their keep-alive timeout, so keep sweeping.
    const sweep = setInterval(() => {
      // Http2SecureServer has it too (for its h1 fallback), though @types/node omits it.
      for (const e of entries) (e.server as http.Server).closeIdleConnections();
    }, DRAIN_SWEEP_MS);
    const force = setTimeout(() => {
      if (sessions) for (const s of this.#sessions) s.destroy();
      for (const e of entries) for (const socket of e.sockets) socket.destroy();
    }, forceAfterMs);
    try {
      await closed;
    } finally {
      clearInterval(sweep);
      clearTimeout(force);
    }
    // A closed net.Server has no connections left, though sockets' own 'close' events may still be queued.
    for (const e of entries) e.sockets.clear();
  }

  /** While draining, h1 responses carry `Connection: close`, so clients move on before the sweep closes the socket. */
  #drainAware<Req, Res extends EdgeResponse>(handler: (req: Req, res: Res) => void): (req: Req, res: Res) => void {
    return (req, res) => {
      if (this.#draining && res instanceof http.ServerResponse) res.shouldKeepAlive = false;
      handler(req, res);
    };
  }

  #secureServer(config: ServerConfig['https'], certs: CertificateSet, t: ListenerTimeouts, handler: RequestHandler): https.Server | Http2SecureServer {
    const tlsOptions = {
      ...certs.contextOptions(),
      requestCert: certs.requestCert,
      rejectUnauthorized: certs.requestCert && config.requireClientCert,
      // Asks whichever set is current: a reload may bring SNI entries the first set did not have.
      SNICallback: (servername: string, cb: (err: Error | null, ctx?: SecureContext) => void) => {
        const current = this.#certs?.sniCallback();
        if (current === undefined) cb(null);
        else current(servername, cb);
      },
      handshakeTimeout: t.headersTimeoutMs,
    };
    if (!config.http2) {
      const server = https.createServer({ ...tlsOptions, ...http1Options(t), ALPNProtocols: ['http/1.1'] }, handler);
      server.setTimeout(t.idleTimeoutMs);
      server.on('tlsClientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
        this.#log.debug({ err }, 'TLS handshake failed');
        answerPlainHttp(err, socket);
      });
      server.on('clientError', onClientError(this.#log));
      return server;
    }
    // With allowHTTP1, 'request' carries only HTTP/1.1 requests (http's own objects), once the
    // h2 streams are taken off the compatibility layer below.
    const h1: H1Handler = handler;
    const server = http2.createSecureServer(
      {
        ...tlsOptions,
        allowHTTP1: true,
        settings: { maxConcurrentStreams: ADVERTISED_CONCURRENT_STREAMS, maxHeaderListSize: MAX_HEADER_BYTES },
      },
      h1 as unknown as Parameters<typeof http2.createSecureServer>[1],
    );
    // The h1 fallback needs the 'request' listener above, and adding one makes Node serve every h2
    // stream through its compatibility objects too; h2 streams are served on the stream API instead.
    server.removeAllListeners('stream');
    server.on('stream', h2Streams(handler, t, this.#log));
    // The h1 fallback reads these before 'listening' (the deadline checker starts then).
    const knobs: Http1Knobs = {
      headersTimeout: t.headersTimeoutMs,
      requestTimeout: t.requestTimeoutMs,
      keepAliveTimeout: t.keepAliveTimeoutMs,
      maxHeaderSize: MAX_HEADER_BYTES,
      connectionsCheckingInterval: t.checkIntervalMs,
      timeout: t.idleTimeoutMs,
    };
    Object.assign(server, knobs);
    // Receives TLS handshake failures too (Node re-emits tlsClientError here); onClientError only answers HTTP parse errors.
    server.on('clientError', onClientError(this.#log));
    server.on('sessionError', (err: Error) => this.#log.debug({ err }, 'HTTP/2 session error'));
    server.on('session', (session: ServerHttp2Session) => {
      if (this.#draining) session.close();
      prefaceDeadline(session, t.headersTimeoutMs);
      this.#sessions.add(session);
      session.once('close', () => this.#sessions.delete(session));
    });
    return server;
  }

  #add(name: Entry['name'], server: AnyServer, host: string, port: number): void {
    const sockets = new Set<Socket>();
    (server as NetServer).on('connection', (socket: Socket) => {
      sockets.add(socket);
      socket.once('close', () => sockets.delete(socket));
    });
    this.#entries.push({ name, server, host, port, sockets });
  }

  #bind(e: Entry): Promise<void> {
    return new Promise((resolveBind, rejectBind) => {
      const onError = (err: NodeJS.ErrnoException): void => {
        const why = BIND_ERRORS[err.code ?? ''] ?? err.message;
        rejectBind(new Error(`${e.name} listener cannot listen on ${e.host}:${e.port}: ${why} (${err.code ?? 'error'})`, { cause: err }));
      };
      e.server.once('error', onError);
      e.server.listen({ host: e.host, port: e.port }, () => {
        e.server.off('error', onError);
        // Accept errors (EMFILE and the like) must not become an uncaught 'error'.
        e.server.on('error', (err: Error) => this.#log.error({ err, listener: e.name }, 'listener error'));
        resolveBind();
      });
    });
  }
}

const BIND_ERRORS: Record<string, string> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'address not available on this host',
  ENOTFOUND: 'unknown host',
};

function http1Options(t: ListenerTimeouts): http.ServerOptions {
  return {
    headersTimeout: t.headersTimeoutMs,
    requestTimeout: t.requestTimeoutMs,
    keepAliveTimeout: t.keepAliveTimeoutMs,
    connectionsCheckingInterval: t.checkIntervalMs,
    maxHeaderSize: MAX_HEADER_BYTES,
  };
}

/**
 * Serves h2 streams as H2Request/H2Response, with the deadlines Node gives h1 requests, which its
 * h2 server does not have: a request head over MAX_HEADER_BYTES gets 431 (nghttp2 only advertises
 * the limit), and a request whose body is still arriving after requestTimeoutMs gets 408 and its
 * stream is reset, so a trickle of DATA frames cannot hold a stream (and its buffered body) open
 * indefinitely. A stream's errors (a reset, a protocol error) end it: they are logged, never thrown.
 * A stream beyond MAX_CONCURRENT_STREAMS of its session is refused alone (REFUSED_STREAM).
 */
function h2Streams(
  handler: RequestHandler,
  t: ListenerTimeouts,
  log: Logger,
): (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, flags: number, rawHeaders: string[]) => void {
  const onError = (err: Error): void => log.debug({ err }, 'HTTP/2 stream error');
  const served = new WeakMap<Http2Session, number>();
  // A stream whose body is still arriving after requestTimeoutMs gets 408 and is cancelled. One
  // sweep for every stream, as Node checks h1 requests on its connectionsCheckingInterval.
  const pending = new Map<ServerHttp2Stream, H2Response>();
  const deadlines = new Deadlines<ServerHttp2Stream>(t.requestTimeoutMs, t.checkIntervalMs, (stream) => {
    const res = pending.get(stream);
    pending.delete(stream);
    log.debug('HTTP/2 request body not received in time: stream cancelled');
    if (res !== undefined && !res.headersSent) answer(res, 408, 'request body not received in time');
    stream.close(http2.constants.NGHTTP2_CANCEL);
  });
  // Shared by every stream (they read the stream as `this`): no closure per stream for these.
  function bodyDone(this: ServerHttp2Stream): void {
    deadlines.delete(this);
    pending.delete(this);
  }
  function finished(this: ServerHttp2Stream): void {
    drainUnread(this);
  }
  return (stream, headers, _flags, rawHeaders) => {
    stream.on('error', onError);
    const session = stream.session;
    if (session === undefined) return;
    const open = (served.get(session) ?? 0) + 1;
    if (open > MAX_CONCURRENT_STREAMS) return stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    served.set(session, open);
    // on(), not once(): each fires once, and once() wraps every listener in two more objects.
    stream.on('close', () => served.set(session, served.get(session)! - 1));
    if (!stream.endAfterHeaders) stream.on('finish', finished);
    const req = new H2Request(stream, headers, rawHeaders);
    const res = new H2Response(stream);
    if (headerListBytes(rawHeaders) > MAX_HEADER_BYTES) return answer(res, 431, 'request header fields too large');
    // CONNECT (a tunnel) is not served, as Node's h2 compatibility layer answered it.
    if (headers[':method'] === 'CONNECT') return answer(res, 405, 'method not allowed');
    // An expectation other than 100-continue is refused, as Node's h1 server and h2 compatibility layer do.
    const expect = headers.expect;
    if (expect !== undefined && expect.toLowerCase() !== '100-continue') return answer(res, 417, 'expectation failed');
    if (!stream.endAfterHeaders) {
      pending.set(stream, res);
      deadlines.add(stream);
      // 'end': the whole body was read; 'close': the stream is gone either way.
      stream.on('end', bodyDone);
      stream.on('close', bodyDone);
    }
    handler(req, res);
  };
}

/**
 * A stream answered before anything read its body (a refusal from the head: 401, 403, 429, or the
 * listener's own 4xx). Node would reset it (RST_STREAM NO_ERROR, RFC 9113 §8.1), which leaves a
 * client still sending that body with DATA it can no longer send: Node's own client then never
 * closes that stream and keeps the DATA counted against its session's memory, so one that repeats
 * such requests (about 300 refused 32 KiB bodies on one session) has every later stream of that
 * session fail. The body is read to its end instead and dropped, as Node's h1 server discards an
 * unread body: the upload finishes and the stream ends as an answered one does. Past
 * DRAIN_MAX_BYTES it is reset after all, bounding the edge's work; a body held back is bounded by
 * the request deadline.
 */
function drainUnread(stream: ServerHttp2Stream): void {
  // Flowing null: nothing ever read it. A body being read, streamed upstream or paused at a limit is its reader's.
  if (stream.readableFlowing !== null) return;
  let left = DRAIN_MAX_BYTES;
  stream.on('data', (chunk: Buffer) => {
    left -= chunk.length;
    if (left < 0) closeAnsweredStream(stream);
  });
}

/** The listener's own refusal of an h2 request, before the pipeline sees it. */
function answer(res: H2Response, status: number, error: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error, code: 'invalid_request' }));
}

/** Header list size as HTTP/2 counts it (RFC 9113 §6.5.2: name + value + 32 per field). */
function headerListBytes(raw: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < raw.length; i++) n += raw[i]!.length + (i % 2 === 0 ? 32 : 0);
  return n;
}

/** An h2 connection must send its preface (and SETTINGS) within the header timeout, as an h1 request must send its head. */
function prefaceDeadline(session: ServerHttp2Session, ms: number): void {
  const timer = setTimeout(() => session.destroy(), ms);
  const clear = (): void => clearTimeout(timer);
  session.once('remoteSettings', clear);
  session.once('close', clear);
}

function plainServer(t: ListenerTimeouts, handler: H1Handler, log: Logger): http.Server {
  const server = http.createServer(http1Options(t), handler);
  server.setTimeout(t.idleTimeoutMs);
  server.on('clientError', onClientError(log));
  return server;
}

/** Resolves once the server has stopped and its last connection is gone. */
function closeServer(server: AnyServer): Promise<void> {
  return new Promise((done) => {
    server.close(() => done());
  });
}

function rawResponse(status: string, body = ''): Buffer {
  const type = body === '' ? '' : 'Content-Type: application/json\r\n';
  return Buffer.from(`HTTP/1.1 ${status}\r\nConnection: close\r\n${type}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, 'latin1');
}

/** Answers to h1 parse errors; Node's own codes for the special cases, the refusal body of src/errors.ts for the rest. */
const PARSE_ERROR_RESPONSES: Record<string, Buffer> = {
  HPE_HEADER_OVERFLOW: rawResponse('431 Request Header Fields Too Large'),
  HPE_CHUNK_EXTENSIONS_OVERFLOW: rawResponse('413 Payload Too Large'),
  ERR_HTTP_REQUEST_TIMEOUT: rawResponse('408 Request Timeout'),
};
const BAD_REQUEST = rawResponse('400 Bad Request', '{"error":"bad request","code":"invalid_request"}');

/** What a plain-HTTP request to the TLS port gets, as nginx answers it: 400 in the refusal shape of src/errors.ts. */
const PLAIN_HTTP_ON_TLS = rawResponse('400 Bad Request', '{"error":"plain HTTP request sent to the HTTPS port: use https://","code":"invalid_request"}');

/**
 * OpenSSL recognises an HTTP request line where a TLS handshake should be (ERR_SSL_HTTP_REQUEST).
 * The TLS layer is gone by then, but the TCP socket under it still writes: the client gets a
 * readable 400 instead of an empty reply. Node keeps that socket as the TLS socket's `_parent`
 * (not a public API: without it, the connection is only closed, as before). True when answered.
 */
function answerPlainHttp(err: NodeJS.ErrnoException, socket: Duplex): boolean {
  if (err.code !== 'ERR_SSL_HTTP_REQUEST') return false;
  const raw = (socket as { _parent?: unknown })._parent;
  if (!(raw instanceof Socket) || !raw.writable) return false;
  raw.end(PLAIN_HTTP_ON_TLS, () => raw.destroy());
  return true;
}

/**
 * A 'clientError' listener: a malformed or too-slow h1 request head gets a one-shot answer and the
 * connection closes; anything else (resets, TLS failures) just closes it.
 */
function onClientError(log: Logger): (err: NodeJS.ErrnoException, socket: Duplex) => void {
  return (err, socket) => {
    const code = err.code ?? '';
    log.debug({ err }, 'client error');
    if (answerPlainHttp(err, socket)) return;
    const answer = PARSE_ERROR_RESPONSES[code] ?? (code.startsWith('HPE_') ? BAD_REQUEST : null);
    // Writing over a response already under way would corrupt what the client reads (Node checks the same).
    const inFlight = (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
    if (answer === null || !socket.writable || inFlight) {
      socket.destroy();
      return;
    }
    socket.end(answer, () => socket.destroy());
  };
}
