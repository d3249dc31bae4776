/**
 * The benchmark's broker double: a plain node:http server answering from memory, run in its own
 * process so it never shares the proxy's or the load generator's event loop. Unlike the test
 * double (test/helpers/broker-double.ts) it keeps no state and checks nothing: push answers 201
 * with a JSON array, pop 200 with a fixed ~580-byte batch, ack 200. A `wait=true` pop parks until
 * the benchmark releases it (POST /__bench/release) or its `timeout` passes, then answers 204.
 *
 * Run directly (`node --import tsx bench/double.ts`), it listens on 127.0.0.1:<port 0> and sends
 * `{ port }` to its parent over IPC.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

const JSON_HEADERS = { 'content-type': 'application/json' };

const PUSH_REPLY = Buffer.from(
  JSON.stringify([{ index: 0, message_id: '0197f2b1-7c1e-7000-8000-000000000001', transaction_id: 'bench-1', queueName: 'bench', status: 'queued' }]),
);
const ACK_REPLY = Buffer.from(JSON.stringify([{ index: 0, transactionId: 'bench-1', success: true, noop: false }]));
const HEALTH_REPLY = Buffer.from('{"status":"healthy"}');

/** A pop answer shaped like the seed's, padded to about 580 bytes. */
export const POP_REPLY: Buffer = (() => {
  const leaseId = '0197f2b2-0000-7000-8000-00000000beef';
  const partitionId = '0197f2b0-0000-7000-8000-00000000cafe';
  const message = (pad: string) => ({
    id: '0197f2b1-7c1e-7000-8000-000000000001',
    transactionId: 'bench-1',
    traceId: null,
    data: { n: 1, pad },
    producerSub: null,
    createdAt: '2026-07-30T09:12:44.031Z',
    partitionId,
    partition: 'Default',
    leaseId,
    consumerGroup: '__QUEUE_MODE__',
  });
  const doc = (pad: string) => ({
    success: true,
    queue: 'bench',
    partition: 'Default',
    partitionId,
    leaseId,
    consumerGroup: '__QUEUE_MODE__',
    messages: [message(pad)],
  });
  const base = JSON.stringify(doc('')).length;
  return Buffer.from(JSON.stringify(doc('x'.repeat(Math.max(0, 580 - base)))));
})();

/** A running fast double. */
export interface FastDouble {
  readonly port: number;
  /** Pops parked right now. */
  parked(): number;
  /** Answers every parked pop with 204 now. */
  release(): number;
  close(): Promise<void>;
}

class Parked {
  readonly #res: ServerResponse;
  readonly #timer: NodeJS.Timeout;
  readonly #all: Set<Parked>;

  constructor(res: ServerResponse, timeoutMs: number, all: Set<Parked>) {
    this.#res = res;
    this.#all = all;
    this.#timer = setTimeout(() => this.answer(), timeoutMs);
    all.add(this);
    res.once('close', () => this.#forget());
  }

  answer(): void {
    this.#forget();
    if (!this.#res.headersSent && !this.#res.destroyed) {
      this.#res.writeHead(204);
      this.#res.end();
    }
  }

  #forget(): void {
    clearTimeout(this.#timer);
    this.#all.delete(this);
  }
}

function reply(res: ServerResponse, status: number, body: Buffer): void {
  res.writeHead(status, { ...JSON_HEADERS, 'content-length': body.length });
  res.end(body);
}

/** Reads and drops the request body, then answers. */
function afterBody(req: IncomingMessage, answer: () => void): void {
  req.on('data', () => {});
  req.on('end', answer);
}

/** Starts the double on 127.0.0.1 (port 0 = any). */
export async function startFastDouble(port = 0): Promise<FastDouble> {
  const parked = new Set<Parked>();
  const server: Server = createServer((req, res) => {
    const url = req.url ?? '/';
    if (req.method === 'POST' && url.startsWith('/api/v1/push')) return afterBody(req, () => reply(res, 201, PUSH_REPLY));
    if (req.method === 'POST' && url.startsWith('/api/v1/ack')) return afterBody(req, () => reply(res, 200, ACK_REPLY));
    if (req.method === 'GET' && url.startsWith('/api/v1/pop')) {
      const q = url.indexOf('?');
      const params = new URLSearchParams(q === -1 ? '' : url.slice(q + 1));
      if (params.get('wait') === 'true') {
        new Parked(res, Number(params.get('timeout') ?? 30000), parked);
        return;
      }
      return reply(res, 200, POP_REPLY);
    }
    if (url === '/health') return reply(res, 200, HEALTH_REPLY);
    if (url === '/__bench/stats') return reply(res, 200, Buffer.from(JSON.stringify({ parked: parked.size })));
    if (req.method === 'POST' && url === '/__bench/release') {
      const n = releaseAll();
      return reply(res, 200, Buffer.from(JSON.stringify({ released: n })));
    }
    reply(res, 404, Buffer.from('{"error":"not found"}'));
  });
  // Parked pops and idle keep-alive connections are held as long as the benchmark wants.
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 60_000;
  server.requestTimeout = 0;
  server.maxRequestsPerSocket = 0;
  const releaseAll = (): number => {
    const all = [...parked];
    for (const p of all) p.answer();
    return all.length;
  };
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', 4096, resolve));
  return {
    port: (server.address() as AddressInfo).port,
    parked: () => parked.size,
    release: releaseAll,
    close: () =>
      new Promise<void>((resolve) => {
        releaseAll();
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const double = await startFastDouble(Number(process.env.BENCH_DOUBLE_PORT ?? 0));
  process.send?.({ port: double.port });
  process.on('SIGTERM', () => void double.close().then(() => process.exit(0)));
}
