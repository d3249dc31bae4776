/**
 * The floor: the least a Node process does to terminate TLS and forward a request to the broker
 * double — a node:https listener (node:http2 with HTTP/1.1 fallback for the h2 rows) with the
 * bench's certificate, an undici Pool to the double driven by dispatch() the way
 * src/upstream/forward.ts drives it, the request body buffered and the answer relayed. No routing,
 * auth, limits, logs or metrics. Every edge row is reported as a multiple of this one's CPU per
 * request: what the edge spends above it is the edge's own overhead.
 *
 * Run as `node --import tsx bench/floor.ts <cert> <key> <brokerUrl> <h1|h2>`; it sends `{ port }`
 * to its parent over IPC.
 */
import http2 from 'node:http2';
import https from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Http2ServerRequest, Http2ServerResponse } from 'node:http2';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

type Req = IncomingMessage | Http2ServerRequest;
type Res = ServerResponse | Http2ServerResponse;

/** Response headers a proxy may not relay (hop-by-hop, and illegal on h2). */
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te', 'trailer']);

function forward(pool: Pool, req: Req, res: Res, body: Buffer | null): void {
  // An h2 stream can be reset while its body is still being read: nothing left to answer.
  if ('stream' in res ? res.stream.destroyed : res.destroyed) return;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const auth = req.headers.authorization;
  if (auth !== undefined) headers.authorization = auth;
  if (body) headers['content-length'] = String(body.length);
  // A client that leaves mid-answer (h2load closes its streams when its time is up) must free the
  // upstream connection, or the paused exchange holds it forever and the pool runs dry.
  let abort: ((err: Error) => void) | null = null;
  let done = false;
  let left = false;
  res.once('close', () => {
    left = true;
    if (!done) abort?.(new Error('client left'));
  });
  pool.dispatch(
    { method: req.method as 'GET', path: req.url ?? '/', headers, body, idempotent: false },
    {
      onConnect(a: (err: Error) => void) {
        abort = a;
        // The client may have left while the request waited for a free connection.
        if (left) a(new Error('client left'));
      },
      onHeaders(status: number, raw: Buffer[], resume: () => void): boolean {
        const out: Record<string, string> = {};
        for (let i = 0; i < raw.length; i += 2) {
          const name = raw[i]!.toString('latin1').toLowerCase();
          if (!HOP.has(name)) out[name] = raw[i + 1]!.toString('latin1');
        }
        res.writeHead(status, out);
        res.on('drain', resume);
        return true;
      },
      onData(chunk: Buffer): boolean {
        return (res as NodeJS.WritableStream).write(chunk);
      },
      onComplete() {
        done = true;
        res.end();
      },
      onError() {
        done = true;
        if (!res.headersSent) {
          res.writeHead(502);
          res.end();
        } else res.destroy();
      },
    },
  );
}

/** Starts the floor forwarder on 127.0.0.1 (port 0); h2 also speaks HTTP/1.1 by ALPN. */
export async function startFloor(cert: string, key: string, brokerUrl: string, proto: 'h1' | 'h2'): Promise<{ port: number }> {
  const pool = new Pool(brokerUrl, { connections: 128 });
  const handler = (req: Req, res: Res) => {
    const declared = req.headers['content-length'];
    if (declared === undefined || declared === '0') {
      forward(pool, req, res, null);
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => forward(pool, req, res, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
  };
  const tls = { cert: readFileSync(cert), key: readFileSync(key) };
  const server = proto === 'h2' ? http2.createSecureServer({ ...tls, allowHTTP1: true, settings: { maxConcurrentStreams: 256 } }, handler) : https.createServer(tls, handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', 4096, resolve));
  return { port: (server.address() as AddressInfo).port };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [cert, key, brokerUrl, proto] = process.argv.slice(2);
  const { port } = await startFloor(cert!, key!, brokerUrl!, proto === 'h2' ? 'h2' : 'h1');
  process.send?.({ port });
  process.on('SIGTERM', () => process.exit(0));
}
