/**
 * HTTP/2 requests served on the stream API (docs/architecture.md, "Listeners"). Node's h2
 * compatibility layer wraps every stream in an Http2ServerRequest (a second Readable that copies
 * each body chunk out of the stream) and an Http2ServerResponse, with their listeners: measured on
 * the bench's h2 floor, that wrapping is a fifth to a third of the CPU a forwarded request costs.
 * These two classes give the request path the few members it uses, straight on the
 * ServerHttp2Stream, with the same meaning the compatibility objects (and h1's) give them.
 */
import http2, { type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';

/** An h2 request: its HEADERS frame, and its body as the stream's readable side. */
export class H2Request {
  readonly httpVersion = '2.0';
  readonly method: string;
  readonly url: string;

  constructor(
    readonly stream: ServerHttp2Stream,
    /** The header block as received, pseudo-headers included (as compatibility objects give it). */
    readonly headers: IncomingHttpHeaders,
    /** Names and values in arrival order, duplicates kept. */
    readonly rawHeaders: string[],
  ) {
    this.method = headers[':method'] ?? 'GET';
    this.url = headers[':path'] ?? '/';
  }

  /** The TLS socket under the session (gone once the session is). */
  get socket(): Socket | undefined {
    return this.stream.session?.socket as Socket | undefined;
  }

  on(event: 'data', listener: (chunk: Buffer) => void): this;
  on(event: 'end' | 'aborted', listener: () => void): this;
  on(event: 'error', listener: (err: Error) => void): this;
  on(event: string, listener: (...args: any[]) => void): this {
    this.stream.on(event, listener);
    return this;
  }

  removeListener(event: 'data' | 'end' | 'error' | 'aborted', listener: (...args: any[]) => void): this {
    this.stream.removeListener(event, listener);
    return this;
  }

  pause(): this {
    this.stream.pause();
    return this;
  }
}

/** The answer to an H2Request: HEADERS through `respond`, the body on the stream's writable side. */
export class H2Response {
  /** Headers set before writeHead (merged under its own). */
  #pending: OutgoingHttpHeaders | null = null;
  /** end() was called: the answer is complete. Not the stream's writableEnded, which a reset sets too. */
  #ended = false;

  constructor(readonly stream: ServerHttp2Stream) {}

  get headersSent(): boolean {
    return this.stream.headersSent;
  }

  /** Also once the stream is closed (a reset, RST_STREAM sent): nothing can be written to it then. */
  get destroyed(): boolean {
    return this.stream.destroyed || this.stream.closed;
  }

  get writableEnded(): boolean {
    return this.#ended;
  }

  setHeader(name: string, value: string): this {
    this.#pending ??= {};
    this.#pending[name] = value;
    return this;
  }

  /**
   * Sends the response head (respond() adds Date). A closed or reset stream takes nothing (its
   * 'close' is on the way), as with the compatibility response. `headers` becomes the answer's:
   * the caller must not reuse the object.
   */
  writeHead(status: number, headers?: OutgoingHttpHeaders | readonly string[]): this {
    if (this.destroyed) return this;
    if (isFlat(headers)) headers = fromFlat(headers);
    if (this.#pending !== null || headers === undefined) this.stream.respond({ ...this.#pending, ...headers, ':status': status });
    else {
      // Every caller builds `headers` for this one answer, so it is used as it is, not copied.
      headers[':status'] = status;
      this.stream.respond(headers);
    }
    return this;
  }

  /** 100 Continue, once the request path decided to read the body. */
  writeContinue(): void {
    if (!this.destroyed) this.stream.additionalHeaders({ ':status': 100 });
  }

  write(chunk: Buffer): boolean {
    return this.stream.write(chunk);
  }

  end(body?: string | Buffer): this {
    if (this.destroyed) return this;
    this.#ended = true;
    if (!this.stream.headersSent) this.writeHead(200);
    if (body === undefined) this.stream.end();
    else this.stream.end(body);
    return this;
  }

  /** A broken answer: RST_STREAM(INTERNAL_ERROR), so the client cannot take a cut body for a whole one. */
  destroy(): void {
    if (this.stream.closed) this.stream.destroy();
    else this.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
  }

  on(event: 'close' | 'finish' | 'drain', listener: () => void): this {
    this.stream.on(event, listener);
    return this;
  }

  once(event: 'close' | 'finish', listener: () => void): this {
    this.stream.once(event, listener);
    return this;
  }

  removeListener(event: 'close' | 'finish' | 'drain', listener: () => void): this {
    this.stream.removeListener(event, listener);
    return this;
  }
}

function isFlat(headers: OutgoingHttpHeaders | readonly string[] | undefined): headers is readonly string[] {
  return Array.isArray(headers);
}

/** A flat [name, value, …] list (what h1's writeHead takes) as the object respond() takes, repeated names as one list. */
function fromFlat(flat: readonly string[]): OutgoingHttpHeaders {
  // No prototype: a field named like one of Object's (a broker's `Constructor`) is a field like any other.
  const out: Record<string, string | string[]> = Object.create(null);
  for (let i = 0; i < flat.length; i += 2) {
    const name = flat[i]!;
    const value = flat[i + 1]!;
    const prev = out[name];
    out[name] = prev === undefined ? value : Array.isArray(prev) ? [...prev, value] : [prev, value];
  }
  return out;
}
