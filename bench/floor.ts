/**
 * The floor: the least a Node process does to terminate TLS and forward a request to the broker
 * double — a node:https listener (node:http2 with HTTP/1.1 fallback for the h2 rows, its h2
 * streams served on the stream API as the edge serves them) with the bench's certificate, an
 * undici Pool to the double driven by dispatch() the way src/upstream/forward.ts drives it, the
 * request body buffered and the answer relayed. No routing, auth, limits, logs or metrics. Every
 * edge row is reported as a multiple of this one's CPU per request: what the edge spends above it
 * is the edge's own overhead.
 *
 * Run as `node --import tsx bench/floor.ts <cert> <key> <brokerUrl> <h1|h2>`; it sends `{ port }`
 * to its parent over IPC.
 */
import http2, { type IncomingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

/** Response headers a proxy may not relay (hop-by-hop, and illegal on h2). */
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te', 'trailer']);

/** Where an answer goes: an h1 response, or an h2 stream (headers by respond()). */
type Out = ServerResponse | ServerHttp2Stream;

function isStream(out: Out): out is ServerHttp2Stream {
  return 'respond' in out;
}

function forward(pool: Pool, method: string, path: string, authorization: string | undefined, out: Out, body: Buffer | null): void {
  // An h2 stream can be reset while its body is still being read: nothing left to answer.
  if (out.destroyed) return;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (authorization !== undefined) headers.authorization = authorization;
  if (body) headers['content-length'] = String(body.length);
  // A client that leaves mid-answer (h2load closes its streams when its time is up) must free the
  // upstream connection, or the paused exchange holds it forever and the pool runs dry.
  let abort: ((err: Error) => void) | null = null;
  let done = false;
  let left = false;
  out.once('close', () => {
    left = true;
    if (!done) abort?.(new Error('client left'));
  });
  const head = (status: number, fields: Record<string, string>): void => {
    if (!isStream(out)) out.writeHead(status, fields);
    else if (!out.destroyed) out.respond({ ...fields, ':status': status });
  };
  pool.dispatch(
    { method: method as 'GET', path, headers, body, idempotent: false },
    {
      onConnect(a: (err: Error) => void) {
        abort = a;
        // The client may have left while the request waited for a free connection.
        if (left) a(new Error('client left'));
      },
      onHeaders(status: number, raw: Buffer[], resume: () => void): boolean {
        const fields: Record<string, string> = {};
        for (let i = 0; i < raw.length; i += 2) {
          const name = raw[i]!.toString('latin1').toLowerCase();
          if (!HOP.has(name)) fields[name] = raw[i + 1]!.toString('latin1');
        }
        head(status, fields);
        out.on('drain', resume);
        return true;
      },
      onData(chunk: Buffer): boolean {
        return out.write(chunk);
      },
      onComplete() {
        done = true;
        if (!out.destroyed) out.end();
      },
      onError() {
        done = true;
        if (!out.headersSent && !out.destroyed) {
          head(502, {});
          out.end();
        } else out.destroy();
      },
    },
  );
}

/** Buffers a body (when one is declared), then forwards. */
function serve(pool: Pool, method: string, path: string, headers: IncomingHttpHeaders, body: NodeJS.ReadableStream, out: Out): void {
  const declared = headers['content-length'];
  if (declared === undefined || declared === '0') {
    forward(pool, method, path, headers.authorization, out, null);
    return;
  }
  const chunks: Buffer[] = [];
  body.on('data', (c: Buffer) => chunks.push(c));
  body.on('end', () => forward(pool, method, path, headers.authorization, out, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
}

/** Starts the floor forwarder on 127.0.0.1 (port 0); h2 also speaks HTTP/1.1 by ALPN. */
export async function startFloor(cert: string, key: string, brokerUrl: string, proto: 'h1' | 'h2'): Promise<{ port: number }> {
  const pool = new Pool(brokerUrl, { connections: 128 });
  const h1 = (req: IncomingMessage, res: ServerResponse) => serve(pool, req.method ?? 'GET', req.url ?? '/', req.headers, req, res);
  const tls = { cert: readFileSync(cert), key: readFileSync(key) };
  if (proto === 'h1') {
    const server = https.createServer(tls, h1);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', 4096, resolve));
    return { port: (server.address() as AddressInfo).port };
  }
  const server = http2.createSecureServer(
    { ...tls, allowHTTP1: true, settings: { maxConcurrentStreams: 256 } },
    h1 as unknown as Parameters<typeof http2.createSecureServer>[1],
  );
  // As the edge does: HTTP/1.1 through 'request', h2 streams without the compatibility objects.
  server.removeAllListeners('stream');
  server.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
    stream.on('error', () => {});
    serve(pool, headers[':method'] ?? 'GET', headers[':path'] ?? '/', headers, stream, stream);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', 4096, resolve));
  return { port: (server.address() as AddressInfo).port };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [cert, key, brokerUrl, proto] = process.argv.slice(2);
  const { port } = await startFloor(cert!, key!, brokerUrl!, proto === 'h2' ? 'h2' : 'h1');
  process.send?.({ port });
  process.on('SIGTERM', () => process.exit(0));
}
