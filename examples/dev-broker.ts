/**
 * A DEVELOPMENT broker: an in-memory stand-in for a Queen broker, so `npm run demo` works on a fresh
 * clone with nothing else installed. NOT FOR PRODUCTION: one process, no persistence, no auth, no
 * DLQ, no transactions; everything is lost when it stops. It follows the public HTTP contract for
 * the calls a first look needs: `GET /health`, `POST /api/v1/push` (dedup by transactionId per
 * queue and partition), `GET /api/v1/pop/queue/:queue[/partition/:partition]` (batch, long poll
 * with `wait`/`timeout`, one lease per partition and consumer group), `POST /api/v1/ack`,
 * `POST /api/v1/ack/batch` (an ack commits the group's cursor up to that message) and
 * `POST /api/v1/lease/:leaseId/extend`. Anything else answers 404.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

interface Message {
  id: string;
  transactionId: string;
  data: unknown;
  createdAt: string;
}

interface Lease {
  leaseId: string;
  /** Offsets [from, to) of the leased batch. */
  from: number;
  to: number;
  expiresAt: number;
}

interface Partition {
  id: string;
  queue: string;
  name: string;
  messages: Message[];
  byTransaction: Map<string, number>;
  /** Per consumer group: the next offset to deliver (everything before it is committed). */
  cursors: Map<string, number>;
  leases: Map<string, Lease>;
}

interface Waiter {
  queue: string;
  wake(): void;
}

const QUEUE_MODE = '__QUEUE_MODE__';
const DEFAULT_LEASE_SECONDS = 300;
const MAX_BODY_BYTES = 4 * 1024 * 1024;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export interface DevBroker {
  /** http://127.0.0.1:<port> */
  readonly url: string;
  close(): Promise<void>;
}

/** Starts the development broker on 127.0.0.1 (port 0 = any free port). */
export async function startDevBroker(port = 0): Promise<DevBroker> {
  const partitions = new Map<string, Partition>(); // by `${queue}\0${name}`
  const byId = new Map<string, Partition>();
  const waiters = new Set<Waiter>();

  const partitionOf = (queue: string, name: string): Partition => {
    const key = `${queue}\0${name}`;
    let p = partitions.get(key);
    if (!p) {
      p = { id: randomUUID(), queue, name, messages: [], byTransaction: new Map(), cursors: new Map(), leases: new Map() };
      partitions.set(key, p);
      byId.set(p.id, p);
    }
    return p;
  };

  /** The group's live lease on p, dropping an expired one (its messages become deliverable again). */
  const liveLease = (p: Partition, group: string, now: number): Lease | undefined => {
    const lease = p.leases.get(group);
    if (lease && lease.expiresAt <= now) p.leases.delete(group);
    return p.leases.get(group);
  };

  const push = (body: JsonRecord): unknown[] => {
    if (!Array.isArray(body.items)) throw new HttpError(400, 'items must be an array');
    const now = new Date().toISOString();
    const touched = new Set<string>();
    const out = body.items.map((raw: unknown, index: number) => {
      const item = record(raw);
      if (!item || typeof item.queue !== 'string' || item.queue === '' || !('payload' in item))
        throw new HttpError(400, `items[${index}]: queue and payload are required`);
      const p = partitionOf(item.queue, nonEmpty(item.partition, 'Default'));
      const transactionId = nonEmpty(item.transactionId, randomUUID());
      const seen = p.byTransaction.get(transactionId);
      if (seen !== undefined) return { index, message_id: p.messages[seen]!.id, transaction_id: transactionId, queueName: item.queue, status: 'duplicate' };
      const message: Message = { id: randomUUID(), transactionId, data: item.payload, createdAt: now };
      p.byTransaction.set(transactionId, p.messages.push(message) - 1);
      touched.add(item.queue);
      return { index, message_id: message.id, transaction_id: transactionId, queueName: item.queue, status: 'queued' };
    });
    for (const w of waiters) if (touched.has(w.queue)) w.wake();
    return out;
  };

  /** Leases up to `batch` messages of the first partition with something for the group; null when none has. */
  const claim = (queue: string, partition: string | null, group: string, batch: number, leaseSeconds: number): object | null => {
    const now = Date.now();
    for (const p of partitions.values()) {
      if (p.queue !== queue || (partition !== null && p.name !== partition) || liveLease(p, group, now)) continue;
      const from = p.cursors.get(group) ?? 0;
      const to = Math.min(p.messages.length, from + batch);
      if (to <= from) continue;
      const lease: Lease = { leaseId: randomUUID(), from, to, expiresAt: now + leaseSeconds * 1000 };
      p.leases.set(group, lease);
      const common = { partitionId: p.id, partition: p.name, leaseId: lease.leaseId, consumerGroup: group };
      return {
        success: true,
        queue,
        partition: p.name,
        partitionId: p.id,
        leaseId: lease.leaseId,
        consumerGroup: group,
        messages: p.messages
          .slice(from, to)
          .map((m) => ({ id: m.id, transactionId: m.transactionId, traceId: null, data: m.data, producerSub: null, createdAt: m.createdAt, ...common })),
      };
    }
    return null;
  };

  const ack = (a: JsonRecord, group: string): object => {
    const base = { transactionId: a.transactionId ?? null, success: false, error: null as string | null, leaseReleased: false, dlq: false, noop: false };
    const p = typeof a.partitionId === 'string' ? byId.get(a.partitionId) : undefined;
    const offset = p && typeof a.transactionId === 'string' ? p.byTransaction.get(a.transactionId) : undefined;
    if (!p || offset === undefined) return { ...base, error: 'message not found' };
    const cursor = p.cursors.get(group) ?? 0;
    if (offset < cursor) return { ...base, success: true, noop: true, error: 'already committed' };
    const lease = liveLease(p, group, Date.now());
    if (!lease || (a.leaseId !== undefined && a.leaseId !== lease.leaseId)) return { ...base, error: 'invalid or expired lease' };
    if (offset >= lease.to) return { ...base, error: 'position beyond leased batch' };
    const status =
      a.status === undefined || (typeof a.status === 'string' && ['completed', 'success', 'acked', 'ok'].includes(a.status))
        ? 'completed'
        : a.status === 'dlq'
          ? 'dlq'
          : 'failed';
    // completed and dlq move the cursor past the message; failed leaves it there to be delivered again.
    p.cursors.set(group, status === 'failed' ? offset : offset + 1);
    const released = status === 'failed' || offset + 1 >= lease.to;
    if (released) p.leases.delete(group);
    return { ...base, success: true, leaseReleased: released, dlq: status === 'dlq' };
  };

  const extend = (leaseId: string, seconds: number): object => {
    let renewed = 0;
    let expiresAt: number | null = null;
    const now = Date.now();
    for (const p of partitions.values()) {
      for (const [group, lease] of p.leases) {
        if (lease.leaseId !== leaseId || liveLease(p, group, now) === undefined) continue;
        lease.expiresAt = now + seconds * 1000;
        renewed++;
        expiresAt = Math.min(expiresAt ?? Infinity, lease.expiresAt);
      }
    }
    return { renewed, expiresAt: expiresAt === null ? null : new Date(expiresAt).toISOString() };
  };

  const pop = async (req: IncomingMessage, res: ServerResponse, queue: string, partition: string | null, q: URLSearchParams): Promise<void> => {
    const group = q.get('consumerGroup') || QUEUE_MODE;
    const batch = Math.max(1, Number(q.get('batch') ?? 1) || 1);
    const leaseSeconds = Math.max(1, Number(q.get('leaseSeconds') ?? DEFAULT_LEASE_SECONDS) || DEFAULT_LEASE_SECONDS);
    const wait = q.get('wait') === 'true';
    const deadline = Date.now() + Math.max(0, Number(q.get('timeout') ?? 30000) || 30000);
    for (;;) {
      const found = claim(queue, partition, group, batch, leaseSeconds);
      if (found) return send(res, 200, found);
      const left = deadline - Date.now();
      if (!wait || left <= 0 || req.destroyed) {
        // The contract's empty pop: 204 and no body at all.
        res.writeHead(204).end();
        return;
      }
      await new Promise<void>((resolve) => {
        const waiter: Waiter = { queue, wake: done };
        const timer = setTimeout(done, left);
        res.once('close', done);
        waiters.add(waiter);
        function done(): void {
          clearTimeout(timer);
          waiters.delete(waiter);
          res.off('close', done);
          resolve();
        }
      });
      if (res.destroyed) return;
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'http://broker');
    const path = url.pathname;
    if (req.method === 'GET' && path === '/health')
      return send(res, 200, { status: 'healthy', broker: 'queen-edge development broker (in memory, not for production)' });
    const popMatch = /^\/api\/v1\/pop\/queue\/([^/]+)(?:\/partition\/([^/]+))?$/.exec(path);
    if (req.method === 'GET' && popMatch)
      return pop(req, res, decodeURIComponent(popMatch[1]!), popMatch[2] === undefined ? null : decodeURIComponent(popMatch[2]), url.searchParams);
    if (req.method === 'POST' && path === '/api/v1/push') return send(res, 201, push(await jsonBody(req)));
    if (req.method === 'POST' && path === '/api/v1/ack') {
      const body = await jsonBody(req);
      return send(res, 200, [{ index: 0, ...ack(body, nonEmpty(body.consumerGroup, QUEUE_MODE)) }]);
    }
    if (req.method === 'POST' && path === '/api/v1/ack/batch') {
      const body = await jsonBody(req);
      if (!Array.isArray(body.acknowledgments)) throw new HttpError(400, 'acknowledgments must be an array');
      return send(
        res,
        200,
        body.acknowledgments.map((raw: unknown, index: number) => {
          const a = record(raw) ?? {};
          return { index, ...ack(a, nonEmpty(a.consumerGroup, nonEmpty(body.consumerGroup, QUEUE_MODE))) };
        }),
      );
    }
    const extendMatch = /^\/api\/v1\/lease\/([^/]+)\/extend$/.exec(path);
    if (req.method === 'POST' && extendMatch) {
      const body = await jsonBody(req);
      return send(res, 200, extend(decodeURIComponent(extendMatch[1]!), Number(body.seconds ?? 60) || 60));
    }
    throw new HttpError(404, `the development broker does not implement ${req.method} ${path}`);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (res.headersSent) return void res.destroy();
      send(res, err instanceof HttpError ? err.status : 500, { error: (err as Error).message });
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      for (const w of waiters) w.wake();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }).end(text);
}

/** A JSON body read field by field; each use checks the type of the fields it reads. */
type JsonRecord = Record<string, unknown>;

const record = (v: unknown): JsonRecord | undefined => (typeof v === 'object' && v !== null ? (v as JsonRecord) : undefined);

/** `v` when it is a non-empty string, else `fallback`. */
const nonEmpty = (v: unknown, fallback: string): string => (typeof v === 'string' && v !== '' ? v : fallback);

/** The request's JSON body; an empty body, or one that is not an object, reads as `{}` (no fields). */
async function jsonBody(req: IncomingMessage): Promise<JsonRecord> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'body too large');
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text === '') return {};
  try {
    return record(JSON.parse(text)) ?? {};
  } catch (err) {
    throw new HttpError(400, `invalid JSON: ${(err as Error).message}`);
  }
}
