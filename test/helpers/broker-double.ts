/**
 * A test double of a Queen broker on 127.0.0.1 (test fixture, never product code). It follows the
 * broker's HTTP contract (seed/using-queen-over-http.md) closely enough that pipeline tests can
 * assert real push/pop/ack semantics through the proxy, and it can imitate the field quirks the
 * proxy must survive (200 pushes, 200 empty long polls, a 204 with stray bytes) and
 * transport failures (hangs, resets, garbage, truncation).
 *
 * Deliberate simplifications, so tests know what they can lean on:
 * - The dedup window never closes, and `failed`/`retry` both redeliver with no retry budget.
 * - A negative ack ends the batch: the cursor clamps and the lease is released at once, so the
 *   redelivery is poppable right away (the seed: "everything after the failed message ... will be
 *   redelivered").
 * - Parked long polls re-check on push, configure, ack and transaction, not when a lease expires.
 * - `subscriptionMode`/`subscriptionFrom` are ignored: every cursor starts at the first message.
 * - An `autoAck` pop holds no lease, so it answers `leaseId: null`.
 *
 * Quirks of broker 0.15.1 it keeps: an ack batch of no acknowledgements is accepted and never
 * answered; a transaction of no operations is `400 {"error":"operations array cannot be empty"}`.
 */
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';

/** One request as the broker received it. */
export interface RecordedRequest {
  method: string;
  /** The raw pathname, undecoded, as it arrived. */
  path: string;
  query: URLSearchParams;
  /** The raw request target (path and query). */
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** Date.now() when the request line arrived. */
  receivedAt: number;
  /** The client went away before we answered. */
  aborted: boolean;
}

/** Knobs; every one can be changed later with setOptions() except `port`. */
export interface BrokerDoubleOptions {
  /** Port to listen on; 0 (default) picks a free one. */
  port?: number;
  /** 201 per the seed; 200 mimics the C++ 0.15 broker. */
  pushStatus?: 200 | 201;
  /**
   * How an empty pop answers. 'no-content' (default): a bodiless 204. 'no-content-with-body': a 204
   * followed on the socket by 29 stray body bytes (the maintenance-mode bug). 'json-200': 200
   * `{"messages":[],"leaseId":null,"success":true}` (C++ 0.15, after the long-poll timeout).
   */
  emptyPopMode?: 'no-content' | 'no-content-with-body' | 'json-200';
  /** Long-poll window when a pop has no `timeout` (30000 ms). */
  defaultTimeoutMs?: number;
  /** Refuse requests whose header block (names, values, ": " and CRLF) exceeds this with 431. */
  headerLimitBytes?: number;
  /** Stamped as `x-broker` on every response, so tests know which broker served. */
  name?: string;
  /** Add `Access-Control-Allow-Origin: *` to every response, as real brokers do. */
  cors?: boolean;
  /** Answer metering fixtures: see AnswerFixtures at the end of this file. */
  answers?: AnswerFixtures;
}

/** A message a `dlq` ack moved out of a group's way. */
export interface DeadLetter {
  queue: string;
  partition: string;
  partitionId: string;
  transactionId: string;
  consumerGroup: string;
  data: unknown;
  error: string | null;
}

/** Ways to make the next requests misbehave. */
export type BrokerFault = 'hang' | 'reset' | 'garbage' | 'truncate' | { status: number };

/** A running broker double and its switches. */
export interface BrokerDouble {
  /** http://127.0.0.1:<port> */
  readonly url: string;
  readonly port: number;
  /** Everything received, in order (including refused and faulted requests). */
  readonly requests: RecordedRequest[];
  /** Messages moved to the dead-letter list by `dlq` acks, in order. */
  readonly deadLetters: readonly DeadLetter[];
  /**
   * Resolves with every matching request once at least n requests matching pred have been
   * recorded; rejects after timeoutMs (default 5000).
   */
  waitForRequests(n: number, pred?: (r: RecordedRequest) => boolean, timeoutMs?: number): Promise<RecordedRequest[]>;
  /** Number of requests currently parked in a long poll. */
  parked(): number;
  /** Changes options for the following requests (`port` is only read at start). */
  setOptions(patch: Partial<BrokerDoubleOptions>): void;
  /**
   * Makes the next `count` requests (default: until cleared) misbehave: 'hang' accepts and never
   * answers, 'reset' resets the socket on arrival, 'garbage' writes invalid HTTP bytes then closes,
   * 'truncate' answers 200 with content-length 100 and 10 bytes then closes, `{status}` answers
   * that status with a JSON error body. Faulted requests are still recorded. Replaces any fault set.
   */
  fault(kind: BrokerFault, count?: number): void;
  /**
   * Makes every request for which `rule` returns a fault misbehave that way, until cleared, ahead of
   * fault(): one tenant's slow or failing route while the rest of the broker stays well.
   */
  faultWhen(rule: (r: RecordedRequest) => BrokerFault | null): void;
  /** Clears fault() and faultWhen(). */
  clearFaults(): void;
  /** Stops listening and destroys all sockets (a crash). Parked pops are dropped unanswered. */
  close(): Promise<void>;
  /** Listens again on the same port after close() (a restart; state kept). */
  restart(): Promise<void>;
  /** Clears queues, cursors, leases, dead letters and recorded requests. */
  reset(): void;
  /** The broker's maintenance switches, as `/api/v1/system/maintenance[/pop]` set them. */
  readonly maintenance: { push: boolean; pop: boolean };
}

/** The seed's name for the queue-mode consumer group. */
const QUEUE_MODE = '__QUEUE_MODE__';
const DEFAULT_LEASE_SECONDS = 300;
/** The seed: an extend with an empty body renews for 60 s. */
const DEFAULT_EXTEND_SECONDS = 60;
/** 29 bytes, the size of what the maintenance-mode broker leaves on the socket after a 204. */
const STRAY_204_BYTES = Buffer.from('{"error":"under maintenance"}');
/** Not a status line: an HTTP/1.1 client must fail to parse this. */
const GARBAGE_BYTES = Buffer.from('QUEEN?? \x00\x01\x02 this is not http\r\n\r\n');
const TRUNCATED_LENGTH = 100;
const TRUNCATED_BYTES = Buffer.from('{"success"');

// ---------------------------------------------------------------------------------------------
// Broker state: plain data only, so a transaction can structuredClone() it, apply its operations
// to the draft, and either swap the draft in or drop it (all or nothing, seed "Transactions").

interface StoredMessage {
  id: string;
  transactionId: string;
  data: unknown;
  producerSub: string | null;
  createdAt: string;
}

/** One (partition, group) lease row. A lease id owns one row per partition it claimed. */
interface Claim {
  leaseId: string;
  partitionId: string;
  group: string;
  /** Offset one past the last leased message. */
  end: number;
  expiresAt: number;
}

/** The one cursor per (partition, consumer group) the seed describes; `next` is the first unconsumed offset. */
interface Cursor {
  next: number;
  /** The row of the in-flight leased batch, if any; an expired row counts as none. */
  claim: Claim | null;
}

interface Partition {
  id: string;
  name: string;
  queue: string;
  messages: StoredMessage[];
  /** transactionId → offset, for dedup and for resolving acks. */
  offsets: Map<string, number>;
  cursors: Map<string, Cursor>;
}

interface Queue {
  name: string;
  namespace: string | null;
  task: string | null;
  partitions: Map<string, Partition>;
}

interface State {
  queues: Map<string, Queue>;
  partitionsById: Map<string, Partition>;
  leases: Map<string, Claim[]>;
  deadLetters: DeadLetter[];
}

function emptyState(): State {
  return { queues: new Map(), partitionsById: new Map(), leases: new Map(), deadLetters: [] };
}

/** A UUIDv7-shaped id (48-bit ms timestamp, version and variant bits), like the broker mints. */
function mintId(): string {
  const b = randomBytes(16);
  b.writeUIntBE(Date.now(), 0, 6);
  b[6] = (b[6]! & 0x0f) | 0x70;
  b[8] = (b[8]! & 0x3f) | 0x80;
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function queueFor(state: State, name: string): Queue {
  let queue = state.queues.get(name);
  if (!queue) {
    // Seed walkthrough step 2: queues and partitions are created on first push, no declaration.
    queue = { name, namespace: null, task: null, partitions: new Map() };
    state.queues.set(name, queue);
  }
  return queue;
}

function partitionFor(state: State, queueName: string, name: string): Partition {
  const queue = queueFor(state, queueName);
  let partition = queue.partitions.get(name);
  if (!partition) {
    partition = { id: mintId(), name, queue: queueName, messages: [], offsets: new Map(), cursors: new Map() };
    queue.partitions.set(name, partition);
    state.partitionsById.set(partition.id, partition);
  }
  return partition;
}

/** The cursor's lease row if it is still in force. */
function liveClaim(cursor: Cursor, now: number): Claim | null {
  return cursor.claim !== null && cursor.claim.expiresAt > now ? cursor.claim : null;
}

/** Whether a lease row is still the one its (partition, group) holds, and unexpired. */
function isHeld(state: State, claim: Claim, now: number): boolean {
  const cursor = state.partitionsById.get(claim.partitionId)?.cursors.get(claim.group);
  return cursor !== undefined && cursor.claim === claim && claim.expiresAt > now;
}

function leaseLive(state: State, leaseId: string, now: number): boolean {
  return (state.leases.get(leaseId) ?? []).some((claim) => isHeld(state, claim, now));
}

interface PushItem {
  queue: string;
  partition: string;
  transactionId: string;
  payload: unknown;
}

interface PushEntry {
  index: number;
  message_id: string;
  transaction_id: string;
  queueName: string;
  status: 'queued' | 'duplicate';
}

/** Validates a push `items` array; a string is the 400 error message. */
function parsePushItems(items: unknown): PushItem[] | string {
  if (!Array.isArray(items)) return 'items must be an array';
  const parsed: PushItem[] = [];
  for (const [i, raw] of items.entries()) {
    const item = asRecord(raw);
    if (!item || typeof item.queue !== 'string' || item.queue === '') return `items[${i}]: queue is required`;
    if (item.payload === undefined) return `items[${i}]: payload is required`;
    parsed.push({
      queue: item.queue,
      partition: typeof item.partition === 'string' && item.partition !== '' ? item.partition : 'Default',
      // Seed: an absent transactionId is minted, which makes the push non-idempotent.
      transactionId: typeof item.transactionId === 'string' && item.transactionId !== '' ? item.transactionId : mintId(),
      payload: item.payload,
    });
  }
  return parsed;
}

/** Appends items in order; one call is one segment, so its messages share createdAt (seed "Pop"). */
function applyPush(state: State, items: PushItem[], producerSub: string | null, now: number): PushEntry[] {
  const createdAt = new Date(now).toISOString();
  return items.map((item, index) => {
    const partition = partitionFor(state, item.queue, item.partition);
    const base = { index, transaction_id: item.transactionId, queueName: item.queue };
    // Checked item by item, so a repeat inside the same request also loses to the first (seed).
    const existing = partition.offsets.get(item.transactionId);
    if (existing !== undefined) return { ...base, message_id: partition.messages[existing]!.id, status: 'duplicate' };
    const message: StoredMessage = { id: mintId(), transactionId: item.transactionId, data: item.payload, producerSub, createdAt };
    partition.offsets.set(item.transactionId, partition.messages.length);
    partition.messages.push(message);
    return { ...base, message_id: message.id, status: 'queued' };
  });
}

interface PopParams {
  group: string;
  batch: number;
  partitions: number;
  leaseMs: number;
  autoAck: boolean;
}

/**
 * Claims up to `partitions` available partitions (no lease in force for this group, messages past
 * the cursor) and takes at most `batch` messages across them, all under one lease id. Null: empty.
 */
function claimBatch(state: State, targets: Partition[], p: PopParams, now: number): Record<string, unknown> | null {
  const leaseId = p.autoAck ? null : mintId();
  const taken: Array<{ partition: Partition; messages: StoredMessage[] }> = [];
  let remaining = p.batch;
  for (const partition of targets) {
    if (taken.length >= p.partitions || remaining === 0) break;
    let cursor = partition.cursors.get(p.group);
    if (!cursor) {
      // Seed walkthrough step 7: a group's cursor is created on first contact, at the start.
      cursor = { next: 0, claim: null };
      partition.cursors.set(p.group, cursor);
    }
    if (liveClaim(cursor, now) || cursor.next >= partition.messages.length) continue;
    const messages = partition.messages.slice(cursor.next, cursor.next + remaining);
    remaining -= messages.length;
    const end = cursor.next + messages.length;
    if (leaseId === null) {
      // autoAck commits the cursor inside the pop (at-most-once), so nothing stays leased.
      cursor.next = end;
      cursor.claim = null;
    } else {
      const claim: Claim = { leaseId, partitionId: partition.id, group: p.group, end, expiresAt: now + p.leaseMs };
      cursor.claim = claim;
      const rows = state.leases.get(leaseId) ?? [];
      rows.push(claim);
      state.leases.set(leaseId, rows);
    }
    taken.push({ partition, messages });
  }
  const first = taken[0];
  if (!first) return null;
  // Top-level partition fields are the first claimed partition's (seed "Pop").
  return {
    success: true,
    queue: first.partition.queue,
    partition: first.partition.name,
    partitionId: first.partition.id,
    leaseId,
    consumerGroup: p.group,
    messages: taken.flatMap(({ partition, messages }) =>
      messages.map((m) => ({
        id: m.id,
        transactionId: m.transactionId,
        traceId: null,
        data: m.data,
        producerSub: m.producerSub,
        createdAt: m.createdAt,
        partitionId: partition.id,
        partition: partition.name,
        leaseId,
        consumerGroup: p.group,
      })),
    ),
  };
}

type AckStatus = 'completed' | 'retry' | 'failed' | 'dlq';

/** Seed: dlq beats failed beats retry at the same offset. */
const NEGATIVE_RANK: Record<AckStatus, number> = { completed: 0, retry: 1, failed: 2, dlq: 3 };

/** Seed normalisation: a typo does not error, it nacks. */
function normaliseStatus(status: unknown): AckStatus {
  if (status === undefined || status === null) return 'completed';
  if (status === 'completed' || status === 'success' || status === 'acked' || status === 'ok') return 'completed';
  if (status === 'retry' || status === 'dlq') return status;
  return 'failed';
}

interface AckEntry {
  index: number;
  transactionId: string | null;
  success: boolean;
  error: string | null;
  leaseReleased: boolean;
  dlq: boolean;
  noop: boolean;
}

interface ResolvedAck {
  index: number;
  offset: number;
  status: AckStatus;
  error: string | null;
}

/**
 * Applies acks as offset commits (seed "Ack is an offset commit"). Acks are resolved against the
 * cursors as they stood when the call began, then each (partition, group) moves once: to the
 * lowest negative signal if there is one, else past the highest completed offset.
 */
function applyAcks(state: State, acks: unknown[], defaultGroup: string, now: number): AckEntry[] {
  const entries: AckEntry[] = [];
  const batches = new Map<Cursor, { partition: Partition; claim: Claim; acks: ResolvedAck[] }>();
  for (const [index, raw] of acks.entries()) {
    const ack = asRecord(raw);
    const txn = typeof ack?.transactionId === 'string' ? ack.transactionId : null;
    const entry: AckEntry = { index, transactionId: txn, success: false, error: null, leaseReleased: false, dlq: false, noop: false };
    entries.push(entry);
    if (!ack || txn === null || typeof ack.partitionId !== 'string') {
      entry.error = 'transactionId and partitionId are required';
      continue;
    }
    const group = typeof ack.consumerGroup === 'string' ? ack.consumerGroup : defaultGroup;
    const partition = state.partitionsById.get(ack.partitionId);
    const cursor = partition?.cursors.get(group);
    if (!partition || !cursor) {
      entry.error = 'consumer not found';
      continue;
    }
    const claim = liveClaim(cursor, now);
    // An ack without a leaseId (the seed's transaction example) binds to the lease in force.
    const leaseId = ack.leaseId ?? null;
    if (!claim || (leaseId !== null && leaseId !== claim.leaseId)) {
      entry.error = 'invalid or expired lease';
      continue;
    }
    const offset = partition.offsets.get(txn);
    if (offset === undefined) {
      entry.error = 'unresolvable';
      entry.noop = true;
      continue;
    }
    if (offset < cursor.next) {
      // Already committed: recognised, changed nothing, and reported as such (seed).
      entry.success = true;
      entry.noop = true;
      continue;
    }
    if (offset >= claim.end) {
      entry.error = 'position beyond leased batch';
      continue;
    }
    const batch = batches.get(cursor) ?? { partition, claim, acks: [] };
    batch.acks.push({ index, offset, status: normaliseStatus(ack.status), error: typeof ack.error === 'string' ? ack.error : null });
    batches.set(cursor, batch);
  }

  for (const [cursor, { partition, claim, acks: resolved }] of batches) {
    let negative: ResolvedAck | null = null;
    let highestCompleted = -1;
    for (const ack of resolved) {
      if (ack.status === 'completed') highestCompleted = Math.max(highestCompleted, ack.offset);
      else if (
        negative === null ||
        ack.offset < negative.offset ||
        (ack.offset === negative.offset && NEGATIVE_RANK[ack.status] > NEGATIVE_RANK[negative.status])
      )
        negative = ack;
    }
    if (negative === null) {
      // Acking N completes every earlier message of the batch, gap included.
      cursor.next = Math.max(cursor.next, highestCompleted + 1);
    } else if (negative.status === 'dlq') {
      const message = partition.messages[negative.offset]!;
      state.deadLetters.push({
        queue: partition.queue,
        partition: partition.name,
        partitionId: partition.id,
        transactionId: message.transactionId,
        consumerGroup: claim.group,
        data: message.data,
        error: negative.error,
      });
      cursor.next = negative.offset + 1;
    } else {
      cursor.next = negative.offset;
    }
    const released = negative !== null || cursor.next >= claim.end;
    if (released) cursor.claim = null;
    for (const ack of resolved) {
      const entry = entries[ack.index]!;
      entry.success = true;
      entry.leaseReleased = released;
      entry.dlq = ack === negative && ack.status === 'dlq';
      // Signals past the clamp (or outranked at it) change nothing: those messages come back.
      entry.noop = negative !== null && ack !== negative && ack.offset >= negative.offset;
    }
  }
  return entries;
}

/** Renews every row of a lease still in force; `expiresAt` is the earliest deadline (seed "Extend"). */
function extendLease(state: State, leaseId: string, seconds: number, now: number): { renewed: number; expiresAt: string | null } {
  const held = (state.leases.get(leaseId) ?? []).filter((claim) => isHeld(state, claim, now));
  for (const claim of held) claim.expiresAt = now + seconds * 1000;
  const earliest = Math.min(...held.map((claim) => claim.expiresAt));
  return { renewed: held.length, expiresAt: held.length > 0 ? new Date(earliest).toISOString() : null };
}

// ---------------------------------------------------------------------------------------------
// Small parsing helpers.

function asRecord(value: unknown): Record<string, unknown> | null {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
}

type Parsed = { ok: true; value: unknown } | { ok: false; error: string };

/** Seed "Errors": a malformed body is a 400 carrying the parser's message. */
function parseJson(body: Buffer): Parsed {
  try {
    return { ok: true, value: JSON.parse(body.toString('utf8')) };
  } catch (err) {
    return { ok: false, error: (err as Error).message };
  }
}

/** The `sub` of the Authorization JWT, decoded without verification (the broker stamps it as producerSub). */
function subjectOf(authorization: string | undefined): string | null {
  if (!authorization) return null;
  const token = authorization.replace(/^Bearer\s+/i, '');
  const payload = token.split('.')[1];
  if (!payload) return null;
  try {
    const sub: unknown = asRecord(JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')))?.sub;
    return typeof sub === 'string' ? sub : null;
  } catch {
    return null;
  }
}

/**
 * Broker 0.15.1's `get_query_param` (server/src/routes/route_helpers.cpp): the first `key=` found
 * anywhere in the raw query, so `xwait=true` answers for `wait`, up to the next `&`, then its
 * `url_decode`. null: not found (the handler's default).
 */
export function brokerQueryParam(rawQuery: string, key: string): string | null {
  const at = rawQuery.indexOf(`${key}=`);
  if (at === -1) return null;
  const start = at + key.length + 1;
  const end = rawQuery.indexOf('&', start);
  return brokerUrlDecode(rawQuery.slice(start, end === -1 ? undefined : end));
}

/**
 * The broker's `url_decode`: `+` is a space; `%` with two characters after it is replaced by what
 * `istringstream >> hex` reads of them (a leading hex run, so `%4G` is byte 4), else kept; bytes
 * are taken as UTF-8.
 */
function brokerUrlDecode(s: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x25 && i + 2 < s.length) {
      const hex = /^\s*[+-]?[0-9a-fA-F]+/.exec(s.slice(i + 1, i + 3));
      if (hex !== null) {
        bytes.push(parseInt(hex[0], 16) & 0xff);
        i += 2;
        continue;
      }
    }
    bytes.push(c === 0x2b ? 0x20 : c & 0xff);
  }
  return Buffer.from(bytes).toString('utf8');
}

/** `get_query_param_int`: `std::stoi` of the value (leading digits), the default when absent, empty or unreadable. */
function brokerQueryInt(rawQuery: string, key: string, fallback: number): number {
  const m = /^\s*[+-]?\d+/.exec(brokerQueryParam(rawQuery, key) ?? '');
  const n = m === null ? NaN : Number(m[0]);
  return Number.isSafeInteger(n) && Math.abs(n) <= 2 ** 31 - 1 ? n : fallback;
}

/** `get_query_param_bool`: `true` or `1`; the default when absent or empty. */
function brokerQueryBool(rawQuery: string, key: string): boolean {
  const v = brokerQueryParam(rawQuery, key);
  return v === 'true' || v === '1';
}

function rawQueryOf(url: string): string {
  const q = url.indexOf('?');
  return q === -1 ? '' : url.slice(q + 1);
}

function positiveNumber(raw: string | null, fallback: number): number {
  const n = raw === null ? NaN : Number(raw);
  return Number.isFinite(n) && n > 0 ? n : fallback;
}

function headerBytes(rawHeaders: string[]): number {
  let total = 0;
  for (const part of rawHeaders) total += Buffer.byteLength(part);
  // Each name/value pair also costs ": " and CRLF on the wire.
  return total + (rawHeaders.length / 2) * 4;
}

// ---------------------------------------------------------------------------------------------
// The server.

interface Reply {
  status: number;
  body: unknown;
  /** The request changed state, so parked pops should look again. */
  mutated?: boolean;
}

/** A pop: `attempt` reads the state current at call time, so a parked pop sees later pushes. */
interface PopPlan {
  attempt: () => Reply | null;
  wait: boolean;
  timeoutMs: number;
}

/** One request in flight; `settled` once we answered or deliberately killed it. */
interface Exchange {
  rec: RecordedRequest;
  res: ServerResponse;
  settled: boolean;
  parkTimer: NodeJS.Timeout | null;
  attempt: (() => Reply | null) | null;
}

type Options = BrokerDoubleOptions & Required<Pick<BrokerDoubleOptions, 'port' | 'pushStatus' | 'emptyPopMode' | 'defaultTimeoutMs' | 'cors'>>;

const NOT_FOUND: Reply = { status: 404, body: { error: 'not found' } };
/** A request the broker accepts and never answers. */
const NO_ANSWER: Reply = { status: 0, body: null };

class QueenBrokerDouble implements BrokerDouble {
  readonly requests: RecordedRequest[] = [];
  readonly #server: Server;
  readonly #sockets = new Set<Socket>();
  readonly #inflight = new Set<Exchange>();
  /** Parked long polls, in arrival order, which is the order they are offered new messages. */
  readonly #parked = new Set<Exchange>();
  readonly #watchers = new Set<() => void>();
  #options: Options;
  #state: State = emptyState();
  #fault: { kind: BrokerFault; remaining: number } | null = null;
  #faultRule: ((r: RecordedRequest) => BrokerFault | null) | null = null;
  #port: number;
  readonly maintenance = { push: false, pop: false };

  constructor(options: BrokerDoubleOptions) {
    this.#options = { port: 0, pushStatus: 201, emptyPopMode: 'no-content', defaultTimeoutMs: 30000, cors: false, ...options };
    this.#port = this.#options.port;
    this.#server = createServer((req, res) => this.#onRequest(req, res));
    this.#server.on('connection', (socket) => {
      this.#sockets.add(socket);
      socket.on('close', () => this.#sockets.delete(socket));
    });
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  get port(): number {
    return this.#port;
  }

  get deadLetters(): readonly DeadLetter[] {
    return this.#state.deadLetters;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(this.#port, '127.0.0.1', () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    this.#port = (this.#server.address() as AddressInfo).port;
  }

  waitForRequests(n: number, pred: (r: RecordedRequest) => boolean = () => true, timeoutMs = 5000): Promise<RecordedRequest[]> {
    return new Promise((resolve, reject) => {
      const check = (): void => {
        const hits = this.requests.filter(pred);
        if (hits.length < n) return;
        clearTimeout(timer);
        this.#watchers.delete(check);
        resolve(hits);
      };
      const timer = setTimeout(() => {
        this.#watchers.delete(check);
        reject(new Error(`broker double: waited ${timeoutMs} ms for ${n} requests, saw ${this.requests.filter(pred).length}`));
      }, timeoutMs);
      this.#watchers.add(check);
      check();
    });
  }

  parked(): number {
    return this.#parked.size;
  }

  setOptions(patch: Partial<BrokerDoubleOptions>): void {
    this.#options = { ...this.#options, ...patch };
  }

  fault(kind: BrokerFault, count = Infinity): void {
    this.#fault = { kind, remaining: count };
  }

  faultWhen(rule: (r: RecordedRequest) => BrokerFault | null): void {
    this.#faultRule = rule;
  }

  clearFaults(): void {
    this.#fault = null;
    this.#faultRule = null;
  }

  async close(): Promise<void> {
    if (!this.#server.listening) return;
    // We are the ones dropping these, so they must not read as client aborts.
    for (const ex of this.#inflight) this.#settle(ex);
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    for (const socket of this.#sockets) socket.destroy();
    await closed;
  }

  async restart(): Promise<void> {
    if (!this.#server.listening) await this.listen();
  }

  reset(): void {
    this.#state = emptyState();
    this.requests.length = 0;
    this.maintenance.push = false;
    this.maintenance.pop = false;
  }

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const receivedAt = Date.now();
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const target = req.url ?? '/';
      const parsed = new URL(target, 'http://broker.invalid');
      const rec: RecordedRequest = {
        method: req.method ?? 'GET',
        path: parsed.pathname,
        query: parsed.searchParams,
        url: target,
        headers: req.headers,
        body: Buffer.concat(chunks),
        receivedAt,
        aborted: false,
      };
      const ex: Exchange = { rec, res, settled: false, parkTimer: null, attempt: null };
      this.requests.push(rec);
      this.#inflight.add(ex);
      res.on('close', () => {
        if (!ex.settled) rec.aborted = true;
        this.#settle(ex);
      });
      if (this.#options.name !== undefined) res.setHeader('x-broker', this.#options.name);
      if (this.#options.cors) res.setHeader('access-control-allow-origin', '*');
      this.#serve(ex, req.rawHeaders);
      for (const watcher of [...this.#watchers]) watcher();
    });
  }

  #serve(ex: Exchange, rawHeaders: string[]): void {
    const fault = this.#faultRule?.(ex.rec) ?? this.#takeFault();
    if (fault !== null) {
      this.#misbehave(ex, fault);
      return;
    }
    const limit = this.#options.headerLimitBytes;
    if (limit !== undefined && headerBytes(rawHeaders) > limit) {
      this.#sendJson(ex, { status: 431, body: { error: 'request header fields too large' } });
      return;
    }
    let outcome: Reply | PopPlan;
    try {
      outcome = this.#route(ex.rec);
    } catch (err) {
      // A bug in the double: answer it rather than crash the test process.
      outcome = { status: 500, body: { error: `broker double: ${(err as Error).message}` } };
    }
    if ('attempt' in outcome) {
      this.#pop(ex, outcome);
      return;
    }
    // Left unsettled, as a hang: a client that gives up is recorded as an abort.
    if (outcome === NO_ANSWER) return;
    this.#sendJson(ex, outcome);
    if (outcome.mutated) this.#wake();
  }

  #takeFault(): BrokerFault | null {
    const fault = this.#fault;
    if (fault === null || fault.remaining <= 0) return null;
    fault.remaining -= 1;
    return fault.kind;
  }

  #misbehave(ex: Exchange, fault: BrokerFault): void {
    // Left unsettled, so a client that gives up is recorded as an abort.
    if (fault === 'hang') return;
    this.#settle(ex);
    const socket = ex.res.socket;
    if (fault === 'reset') {
      socket?.resetAndDestroy();
    } else if (fault === 'garbage') {
      socket?.end(GARBAGE_BYTES);
    } else if (fault === 'truncate') {
      ex.res.writeHead(200, { 'content-type': 'application/json', 'content-length': TRUNCATED_LENGTH });
      ex.res.write(TRUNCATED_BYTES, () => socket?.destroy());
    } else {
      this.#write(ex.res, { status: fault.status, body: { error: `injected fault: status ${fault.status}` } });
    }
  }

  #route(rec: RecordedRequest): Reply | PopPlan {
    if (rec.method === 'GET' && rec.path === '/health') return { status: 200, body: { status: 'healthy', database: 'connected' } };
    const segments = rec.path.split('/').slice(1);
    if (segments[0] !== 'api' || segments[1] !== 'v1') return NOT_FOUND;
    let route: string[];
    try {
      route = segments.slice(2).map((s) => decodeURIComponent(s));
    } catch {
      return NOT_FOUND;
    }
    const [head, second, third, fourth, fifth] = route;
    if (head === 'system' && second === 'maintenance' && (route.length === 2 || (route.length === 3 && third === 'pop'))) {
      return this.#maintenance(rec, route.length === 3 ? 'pop' : 'push');
    }
    if (rec.method === 'GET' && route.length === 2 && head === 'resources' && second === 'queues') return this.#queues();
    if (rec.method === 'POST') {
      if (route.length === 1 && head === 'push') return this.#push(rec);
      if (route.length === 1 && head === 'configure') return this.#configure(rec);
      if (route.length === 1 && head === 'ack') return this.#ack(rec, false);
      if (route.length === 2 && head === 'ack' && second === 'batch') return this.#ack(rec, true);
      if (route.length === 1 && head === 'transaction') return this.#transaction(rec);
      if (route.length === 3 && head === 'lease' && third === 'extend') return this.#extend(rec, second!);
    }
    if (rec.method === 'GET' && head === 'pop') {
      if (route.length === 1) return this.#popByNamespace(rec);
      if (route.length === 3 && second === 'queue') return this.#popPlan(rec, (state) => [...(state.queues.get(third!)?.partitions.values() ?? [])]);
      if (route.length === 5 && second === 'queue' && fourth === 'partition') {
        return this.#popPlan(rec, (state) => {
          const partition = state.queues.get(third!)?.partitions.get(fifth!);
          return partition ? [partition] : [];
        });
      }
    }
    return NOT_FOUND;
  }

  /** The broker's shapes: GET reads both switches (pop only on `/pop`), POST `{enabled}` sets one. */
  #maintenance(rec: RecordedRequest, which: 'push' | 'pop'): Reply {
    if (rec.method === 'POST') {
      const parsed = parseJson(rec.body);
      const enabled = parsed.ok ? asRecord(parsed.value)?.enabled : undefined;
      if (typeof enabled !== 'boolean') return { status: 400, body: { error: 'enabled (boolean) is required' } };
      this.maintenance[which] = enabled;
    } else if (rec.method !== 'GET') {
      return NOT_FOUND;
    }
    const m = this.maintenance;
    return {
      status: 200,
      body: which === 'pop' ? { popMaintenanceMode: m.pop } : { maintenanceMode: m.push, popMaintenanceMode: m.pop, bufferedMessages: 0, bufferHealthy: true },
    };
  }

  /** `GET /api/v1/resources/queues`: every queue with its partitions' names and depths. */
  #queues(): Reply {
    const queues = [...this.#state.queues.values()].map((q) => ({
      name: q.name,
      namespace: q.namespace,
      task: q.task,
      partitions: [...q.partitions.values()].map((p) => ({ id: p.id, name: p.name, messages: p.messages.length })),
    }));
    return { status: 200, body: { queues } };
  }

  #push(rec: RecordedRequest): Reply {
    const parsed = parseJson(rec.body);
    if (!parsed.ok) return { status: 400, body: { error: parsed.error } };
    const items = parsePushItems(asRecord(parsed.value)?.items);
    if (typeof items === 'string') return { status: 400, body: { error: items } };
    const entries = applyPush(this.#state, items, subjectOf(rec.headers.authorization), Date.now());
    return { status: this.#options.pushStatus, body: entries, mutated: entries.length > 0 };
  }

  /** Stores a queue's namespace and task, which `/api/v1/pop?namespace=&task=` matches on. */
  #configure(rec: RecordedRequest): Reply {
    const parsed = parseJson(rec.body);
    if (!parsed.ok) return { status: 400, body: { error: parsed.error } };
    const body = asRecord(parsed.value);
    if (!body || typeof body.queue !== 'string' || body.queue === '') return { status: 400, body: { error: 'queue is required' } };
    const queue = queueFor(this.#state, body.queue);
    if (typeof body.namespace === 'string') queue.namespace = body.namespace;
    if (typeof body.task === 'string') queue.task = body.task;
    return { status: 200, body: { success: true, queue: queue.name, namespace: queue.namespace, task: queue.task }, mutated: true };
  }

  #ack(rec: RecordedRequest, batch: boolean): Reply {
    const parsed = parseJson(rec.body);
    if (!parsed.ok) return { status: 400, body: { error: parsed.error } };
    const body = asRecord(parsed.value);
    if (!body) return { status: 400, body: { error: 'body must be a JSON object' } };
    let acks: unknown[] = [body];
    let group = QUEUE_MODE;
    if (batch) {
      if (!Array.isArray(body.acknowledgments)) return { status: 400, body: { error: 'acknowledgments must be an array' } };
      acks = body.acknowledgments;
      if (acks.length === 0) return NO_ANSWER;
      if (typeof body.consumerGroup === 'string') group = body.consumerGroup;
    }
    return { status: 200, body: applyAcks(this.#state, acks, group, Date.now()), mutated: true };
  }

  #extend(rec: RecordedRequest, leaseId: string): Reply {
    let seconds = DEFAULT_EXTEND_SECONDS;
    if (rec.body.length > 0) {
      const parsed = parseJson(rec.body);
      if (!parsed.ok) return { status: 400, body: { error: parsed.error } };
      const requested = asRecord(parsed.value)?.seconds;
      if (typeof requested === 'number' && requested > 0) seconds = requested;
    }
    return { status: 200, body: extendLease(this.#state, leaseId, seconds, Date.now()) };
  }

  /**
   * All or nothing: the operations run on a clone of the state, which replaces the live state only
   * if every one succeeded. A shape error is 400; an unknown or expired required lease, or an ack
   * the broker would refuse, is 409 with nothing applied.
   */
  #transaction(rec: RecordedRequest): Reply {
    const parsed = parseJson(rec.body);
    if (!parsed.ok) return { status: 400, body: { error: parsed.error } };
    const body = asRecord(parsed.value);
    if (!body || !Array.isArray(body.operations)) return { status: 400, body: { error: 'operations must be an array' } };
    if (body.operations.length === 0) return { status: 400, body: { error: 'operations array cannot be empty' } };
    const required: unknown = body.requiredLeases ?? [];
    if (!Array.isArray(required) || !required.every((id) => typeof id === 'string')) {
      return { status: 400, body: { error: 'requiredLeases must be an array of lease ids' } };
    }
    const operations: Array<{ type: 'push'; items: PushItem[] } | { type: 'ack'; ack: Record<string, unknown> }> = [];
    for (const [i, raw] of body.operations.entries()) {
      const op = asRecord(raw);
      if (op?.type === 'push') {
        const items = parsePushItems(op.items);
        if (typeof items === 'string') return { status: 400, body: { error: `operations[${i}]: ${items}` } };
        operations.push({ type: 'push', items });
      } else if (op?.type === 'ack') {
        operations.push({ type: 'ack', ack: op });
      } else {
        return { status: 400, body: { error: `operations[${i}]: type must be push or ack` } };
      }
    }
    const now = Date.now();
    for (const leaseId of required as string[]) {
      if (!leaseLive(this.#state, leaseId, now)) return { status: 409, body: { error: `required lease ${leaseId} is expired or unknown` } };
    }
    const draft = structuredClone(this.#state);
    const producerSub = subjectOf(rec.headers.authorization);
    const results: unknown[] = [];
    for (const [i, op] of operations.entries()) {
      if (op.type === 'push') {
        results.push(applyPush(draft, op.items, producerSub, now));
        continue;
      }
      const [entry] = applyAcks(draft, [op.ack], QUEUE_MODE, now);
      if (!entry!.success && this.#options.answers?.rollbackAs200) return rolledBack(results, entry!);
      if (!entry!.success) return { status: 409, body: { error: `operations[${i}]: ${entry!.error ?? 'ack failed'}` } };
      results.push(entry);
    }
    this.#state = draft;
    return { status: 200, body: { success: true, results }, mutated: true };
  }

  #popByNamespace(rec: RecordedRequest): Reply | PopPlan {
    const namespace = brokerQueryParam(rawQueryOf(rec.url), 'namespace');
    const task = brokerQueryParam(rawQueryOf(rec.url), 'task');
    if (namespace === null && task === null) return { status: 400, body: { error: 'namespace or task is required' } };
    return this.#popPlan(rec, (state) =>
      [...state.queues.values()]
        .filter((q) => (namespace === null || q.namespace === namespace) && (task === null || q.task === task))
        .flatMap((q) => [...q.partitions.values()]),
    );
  }

  #popPlan(rec: RecordedRequest, targets: (state: State) => Partition[]): PopPlan {
    // Read as broker 0.15.1 reads them (brokerQueryParam), not as a URL parser would.
    const q = rawQueryOf(rec.url);
    const params: PopParams = {
      group: brokerQueryParam(q, 'consumerGroup') || QUEUE_MODE,
      batch: Math.max(1, brokerQueryInt(q, 'batch', 1)),
      partitions: Math.max(1, brokerQueryInt(q, 'partitions', 1)),
      // Fractional seconds are accepted so tests can watch a lease expire quickly.
      leaseMs: positiveNumber(brokerQueryParam(q, 'leaseSeconds'), DEFAULT_LEASE_SECONDS) * 1000,
      autoAck: brokerQueryBool(q, 'autoAck'),
    };
    const timeoutMs = brokerQueryInt(q, 'timeout', this.#options.defaultTimeoutMs);
    return {
      attempt: () => {
        const body = claimBatch(this.#state, targets(this.#state), params, Date.now());
        return body === null ? null : { status: 200, body };
      },
      wait: brokerQueryBool(q, 'wait'),
      timeoutMs: Math.max(0, timeoutMs),
    };
  }

  #pop(ex: Exchange, plan: PopPlan): void {
    // The broker in pop maintenance answers every pop empty, with the stray-bytes 204.
    if (this.maintenance.pop) {
      this.#sendEmpty(ex, 'no-content-with-body');
      return;
    }
    const big = this.#options.answers?.bigPop;
    if (big) {
      this.#settle(ex);
      return void streamBigPop(ex.res, big);
    }
    const reply = plan.attempt();
    if (reply) {
      this.#sendJson(ex, reply);
      return;
    }
    if (!plan.wait || plan.timeoutMs === 0) {
      this.#sendEmpty(ex);
      return;
    }
    ex.attempt = plan.attempt;
    ex.parkTimer = setTimeout(() => this.#sendEmpty(ex), plan.timeoutMs);
    this.#parked.add(ex);
  }

  /** Offers the state to parked pops in arrival order; each takes what is available to it. */
  #wake(): void {
    for (const ex of [...this.#parked]) {
      const reply = ex.attempt?.();
      if (reply) this.#sendJson(ex, reply);
    }
  }

  /** Marks an exchange done and releases its long-poll slot, whatever ended it. */
  #settle(ex: Exchange): void {
    ex.settled = true;
    if (ex.parkTimer !== null) clearTimeout(ex.parkTimer);
    ex.parkTimer = null;
    this.#parked.delete(ex);
    this.#inflight.delete(ex);
  }

  #sendJson(ex: Exchange, reply: Reply): void {
    if (ex.settled) return;
    this.#settle(ex);
    this.#write(ex.res, reply);
  }

  #write(res: ServerResponse, reply: Reply): void {
    const coding = this.#options.answers?.contentEncoding;
    const plain = Buffer.from(JSON.stringify(reply.body));
    const body = coding ? encodeAnswer(plain, coding) : plain;
    const label = coding === 'corrupt-gzip' ? 'gzip' : coding;
    res.writeHead(reply.status, { 'content-type': 'application/json', 'content-length': body.length, ...(label ? { 'content-encoding': label } : {}) });
    res.end(body);
  }

  #sendEmpty(ex: Exchange, mode = this.#options.emptyPopMode): void {
    if (ex.settled) return;
    this.#settle(ex);
    if (mode === 'json-200') {
      this.#write(ex.res, { status: 200, body: { messages: [], leaseId: null, success: true } });
      return;
    }
    // Node sends neither Content-Length nor Transfer-Encoding on a 204: the seed's bodiless 204.
    ex.res.writeHead(204);
    if (mode === 'no-content') {
      ex.res.end();
      return;
    }
    // The head goes out through the response; the stray bytes are then written straight onto the
    // socket, so they sit where the next response's status line should be.
    const socket = ex.res.socket;
    ex.res.end(() => {
      if (socket && !socket.destroyed && !socket.writableEnded) socket.write(STRAY_204_BYTES);
    });
  }
}

/** Starts a broker double on 127.0.0.1. */
export async function startBrokerDouble(opts: BrokerDoubleOptions = {}): Promise<BrokerDouble> {
  const broker = new QueenBrokerDouble(opts);
  await broker.listen();
  return broker;
}

// ---- Answer fixtures for metering tests: big answers, encoded answers, rolled-back transactions.

export interface AnswerFixtures {
  /**
   * Every pop answers `messages` messages of `messageBytes` bytes of data each (ignoring the
   * queues), generated as it is written, with backpressure: the double never holds the answer.
   * The answer's leaseId is `leaseId`.
   */
  bigPop?: { messages: number; messageBytes: number; leaseId: string };
  /**
   * Every JSON answer is sent in this Content-Encoding. `x-unknown` leaves the bytes plain;
   * `corrupt-gzip` sends plain bytes labelled gzip.
   */
  contentEncoding?: 'gzip' | 'deflate' | 'br' | 'x-unknown' | 'corrupt-gzip';
  /**
   * A transaction whose ack fails answers as the 0.15 broker does (its stored procedure rolls back
   * and returns): `200 {"transactionId","success":false,"error","results"}` instead of a 409.
   */
  rollbackAs200?: boolean;
}

function rolledBack(results: unknown[], failed: { error: string | null }): Reply {
  const error = `ACK operation failed: ${failed.error ?? 'Unknown error'}`;
  return { status: 200, body: { transactionId: mintId(), success: false, error, results: [...results, { ...failed, type: 'ack' }] } };
}

function encodeAnswer(plain: Buffer, coding: NonNullable<AnswerFixtures['contentEncoding']>): Buffer {
  if (coding === 'gzip') return gzipSync(plain);
  if (coding === 'deflate') return deflateSync(plain);
  if (coding === 'br') return brotliCompressSync(plain);
  return plain;
}

async function streamBigPop(res: ServerResponse, big: NonNullable<AnswerFixtures['bigPop']>): Promise<void> {
  const data = Buffer.alloc(big.messageBytes, 'x');
  const send = async (chunk: Buffer) => {
    if (res.write(chunk)) return;
    // Both listeners go once either fires: a 64 MiB answer waits for drain many times.
    await new Promise<void>((resolve) => {
      const done = () => {
        res.off('drain', done).off('close', done);
        resolve();
      };
      res.once('drain', done).once('close', done);
    });
  };
  res.writeHead(200, { 'content-type': 'application/json' });
  try {
    await send(Buffer.from(`{"success":true,"queue":"big","partition":"Default","leaseId":${JSON.stringify(big.leaseId)},"messages":[`));
    for (let i = 0; i < big.messages && !res.destroyed; i++) {
      await send(
        Buffer.from(`${i === 0 ? '' : ','}{"id":"m-${i}","transactionId":"t-${i}","partitionId":"p","leaseId":${JSON.stringify(big.leaseId)},"data":"`),
      );
      await send(data);
      await send(Buffer.from('"}'));
    }
    res.end(']}');
  } catch {
    res.destroy();
  }
}
