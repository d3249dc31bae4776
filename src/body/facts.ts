/**
 * Parsing request bodies, only where the proxy must read them (docs/architecture.md): push
 * items (count, lane, quota), transaction pushes, ack lease ids. The bytes forwarded are the bytes
 * received; the parse is only read, so a body the broker could read differently (duplicate keys,
 * unknown operation types) is refused (docs/security.md).
 */
import { isUtf8 } from 'node:buffer';
import { edgeError, isEdgeError, type EdgeError } from '../errors.js';

/** What the pipeline needs from a JSON body. */
export interface BodyFacts {
  /** Messages pushed (push items, or transaction push items). */
  readonly messages: number;
  /** First pushed item, for the push lane key. */
  readonly firstItem: unknown;
  /** A lease id the request refers to (ack, ack batch, transaction), for broker affinity. */
  readonly leaseId: string | null;
  /** Acknowledgements: an ack (1), an ack batch (its items) or a transaction's ack operations; metered from here when their answer is lost. */
  readonly acks: number;
}

/** Maximum JSON nesting accepted before parsing: deep nesting is refused, not recursed into. */
const MAX_DEPTH = 64;

/**
 * Parses a body the edge counts. Refuses, besides malformed JSON and invalid UTF-8, deep nesting and duplicate keys:
 * JSON.parse keeps the last of `{"items":[…],"items":[]}` while a broker may read the first, so the
 * edge would count one array and forward another.
 */
function parseJson(buf: Buffer): unknown | EdgeError {
  // Decoding replaces invalid UTF-8 with U+FFFD, so the edge would check other text than the bytes
  // it forwards; a lenient decoder at the broker (an overlong `s`) could read another key there.
  if (!isUtf8(buf)) return edgeError('invalid_request', 'body is not valid UTF-8');
  const keys = scanKeys(buf, MAX_DEPTH);
  if (keys === -1) return edgeError('invalid_request', `JSON nested deeper than ${MAX_DEPTH}`);
  let doc: unknown;
  try {
    doc = JSON.parse(buf.toString('utf8'));
  } catch (err) {
    return edgeError('invalid_request', `malformed JSON: ${(err as Error).message}`);
  }
  // Every key is followed by one `:` outside strings; fewer keys parsed means some were repeated.
  if (countKeys(doc) !== keys) return edgeError('invalid_request', 'duplicate key in JSON object');
  return doc;
}

/**
 * One pass on the bytes without decoding: the number of `:` outside strings (= object keys in
 * valid JSON), or -1 when brackets nest deeper than `max`.
 */
function scanKeys(buf: Buffer, max: number): number {
  let depth = 0;
  let keys = 0;
  for (let i = 0; i < buf.length; i++) {
    const c = buf[i]!;
    if (c === 0x22 /* " */) {
      for (;;) {
        const q = closingQuote(buf, i + 1);
        if (q === -1) return keys; // unterminated: JSON.parse refuses it
        i = q;
        if (!escapedAt(buf, q)) break;
      }
    } else if (c === 0x3a /* : */) keys++;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return -1;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return keys;
}

/** Bytes looked at one by one before a string is searched natively (a call costs more than a short key). */
const SHORT_STRING = 24;

/**
 * The next quote at or after `from`, or -1. Keys and short values are scanned here; strings are
 * most of a body's bytes (payloads), and a long one is searched natively.
 */
function closingQuote(buf: Buffer, from: number): number {
  const end = Math.min(buf.length, from + SHORT_STRING);
  for (let j = from; j < end; j++) if (buf[j] === 0x22) return j;
  return end === buf.length ? -1 : buf.indexOf(0x22, end);
}

/** True when the quote at `q` is escaped: preceded by an odd run of backslashes. */
function escapedAt(buf: Buffer, q: number): boolean {
  let n = 0;
  while (q - 1 - n >= 0 && buf[q - 1 - n] === 0x5c) n++;
  return n % 2 === 1;
}

/** Own keys of every object in a parsed document (depth already bounded by scanKeys). */
function countKeys(v: unknown): number {
  if (typeof v !== 'object' || v === null) return 0;
  let n = 0;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) n += countKeys(v[i]);
    return n;
  }
  for (const k in v) {
    n += 1 + countKeys((v as Record<string, unknown>)[k]);
  }
  return n;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `{items:[...]}`: the count and the first item. */
export function pushFacts(buf: Buffer): BodyFacts | EdgeError {
  const doc = parseJson(buf);
  if (isEdgeError(doc)) return doc;
  if (!isObject(doc) || !Array.isArray(doc.items)) return edgeError('invalid_request', 'body must be an object with an "items" array');
  return { messages: doc.items.length, firstItem: doc.items[0], leaseId: null, acks: 0 };
}

/** `{operations:[...], requiredLeases?}`: pushed items, ack operations and the first lease referred to. */
export function transactionFacts(buf: Buffer): BodyFacts | EdgeError {
  const doc = parseJson(buf);
  if (isEdgeError(doc)) return doc;
  if (!isObject(doc) || !Array.isArray(doc.operations)) return edgeError('invalid_request', 'body must be an object with an "operations" array');
  // Broker 0.15.1's own answer, with a code a client can branch on, and no broker call for nothing.
  if (doc.operations.length === 0) return edgeError('invalid_request', 'operations array cannot be empty');
  let messages = 0;
  let acks = 0;
  let firstItem: unknown;
  let leaseId: string | null = Array.isArray(doc.requiredLeases) && typeof doc.requiredLeases[0] === 'string' ? doc.requiredLeases[0] : null;
  for (const op of doc.operations) {
    if (!isObject(op)) return edgeError('invalid_request', 'every operation must be an object');
    // The broker acts on exactly these two types; anything else (`PUSH`, untyped) would be counted
    // as nothing here while a more lenient broker might push it.
    if (op.type !== 'push' && op.type !== 'ack') return edgeError('invalid_request', 'operation "type" must be "push" or "ack"');
    if (op.type === 'push') {
      if (!Array.isArray(op.items)) return edgeError('invalid_request', 'a push operation needs an "items" array');
      messages += op.items.length;
      if (firstItem === undefined) firstItem = op.items[0];
    } else {
      acks++;
      if (leaseId === null && typeof op.leaseId === 'string') leaseId = op.leaseId;
    }
  }
  return { messages, firstItem, leaseId, acks };
}

/** Ack or ack batch: the lease id of the (first) acknowledgement. */
export function ackFacts(buf: Buffer): BodyFacts | EdgeError {
  const doc = parseJson(buf);
  if (isEdgeError(doc)) return doc;
  if (!isObject(doc)) return edgeError('invalid_request', 'body must be a JSON object');
  const acks = Array.isArray(doc.acknowledgments) ? doc.acknowledgments : [doc];
  const first = acks[0];
  const leaseId = isObject(first) && typeof first.leaseId === 'string' ? first.leaseId : null;
  return { messages: 0, firstItem: undefined, leaseId, acks: acks.length };
}
