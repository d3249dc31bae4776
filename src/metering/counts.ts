/**
 * What one exchange adds to a tenant's usage (docs/operating.md), and the arithmetic of usage buckets:
 * pure functions on plain values. Counting rules (answer-scan.ts reads these facts from the answer):
 * - push: items of the broker's response array whose status is `queued`, `duplicate` or `buffered`
 *   (buffered ones sit in the broker's spool and are written on its replay, so leaving them out
 *   would make every push free while the database is down; only `failed` is lost);
 * - pop: length of `messages` in a 200 response (a 204 delivers nothing); with `autoAck=true` the
 *   broker commits them in the pop, so they are acks too;
 * - ack, ack batch: items of the response array with `success: true` (a rejected ack is a 200 item
 *   with `success: false`);
 * - transaction: the push items and ack operations of the request, when the broker answered 2xx
 *   with `success: true` (all or nothing: `200 {"success":false}` is a transaction it rolled back).
 * An answer that was not read (answerLost) counts a push's items and acks from the request.
 */
import type { ErrorCode } from '../errors.js';
import type { Exchange } from './recorder.js';

export const HOUR_MS = 3_600_000;

/** Bucket sizes usage can be read in. */
export type Granularity = 'hour' | 'day' | 'month';

/** A tenant's usage over one bucket (an hour, or a sum of hours). */
export class UsageCounts {
  requests = 0;
  messagesPushed = 0;
  messagesDelivered = 0;
  acks = 0;
  ingressBytes = 0;
  egressBytes = 0;
  /** Refusals by code; only codes that occurred. */
  refusals: Partial<Record<ErrorCode, number>> = {};

  /** Adds another bucket into this one. */
  add(o: UsageCounts): void {
    this.requests += o.requests;
    this.messagesPushed += o.messagesPushed;
    this.messagesDelivered += o.messagesDelivered;
    this.acks += o.acks;
    this.ingressBytes += o.ingressBytes;
    this.egressBytes += o.egressBytes;
    for (const [code, n] of Object.entries(o.refusals) as [ErrorCode, number][]) this.refusals[code] = (this.refusals[code] ?? 0) + n;
  }
}

/** Short names of the numeric fields, as stored in Redis hashes (`<hh>:<name>`). */
export const FIELD_NAMES = {
  requests: 'req',
  messagesPushed: 'push',
  messagesDelivered: 'pop',
  acks: 'ack',
  ingressBytes: 'in',
  egressBytes: 'out',
} as const satisfies Record<Exclude<keyof UsageCounts, 'refusals' | 'add'>, string>;

type NumericField = keyof typeof FIELD_NAMES;
const NUMERIC = Object.keys(FIELD_NAMES) as NumericField[];
const BY_SHORT = new Map<string, NumericField>(NUMERIC.map((f) => [FIELD_NAMES[f], f]));
/** Refusal fields are `r.<code>`. */
const REFUSAL_PREFIX = 'r.';

/** Adds one exchange to `c`. Runs on every request: no allocation beyond a first refusal key. */
export function countExchange(c: UsageCounts, x: Exchange): void {
  c.requests++;
  c.ingressBytes += x.bytesIn;
  c.egressBytes += x.bytesOut;
  if (x.code !== null) c.refusals[x.code] = (c.refusals[x.code] ?? 0) + 1;
  switch (x.route.meter) {
    case 'push':
      // A client that leaves once its push is sent must not make it free.
      c.messagesPushed += x.answerLost ? x.requestMessages : (x.response?.pushed ?? 0);
      break;
    case 'pop':
      if (x.status === 200) {
        const delivered = x.response?.delivered ?? 0;
        c.messagesDelivered += delivered;
        if (x.autoAck) c.acks += delivered;
      }
      break;
    case 'ack':
      c.acks += x.answerLost ? x.requestAcks : (x.response?.acked ?? 0);
      break;
    case 'transaction':
      if ((x.status >= 200 && x.status < 300 && x.response?.committed === true) || x.answerLost) {
        c.messagesPushed += x.requestMessages;
        c.acks += x.requestAcks;
      }
      break;
    case 'none':
      break;
  }
}

/** The `[field, increment]` pairs of one hour's counts (zeros left out), for a day hash. */
export function hourFields(hourOfDay: number, c: UsageCounts): Array<[string, number]> {
  const hh = hourOfDay < 10 ? `0${hourOfDay}` : String(hourOfDay);
  const out: Array<[string, number]> = [];
  for (const f of NUMERIC) if (c[f] !== 0) out.push([`${hh}:${FIELD_NAMES[f]}`, c[f]]);
  for (const [code, n] of Object.entries(c.refusals)) if (n) out.push([`${hh}:${REFUSAL_PREFIX}${code}`, n]);
  return out;
}

/** Parses a day hash (`<hh>:<name>` → count) into hour start → counts. Unknown fields are skipped. */
export function parseDayHash(dayStartMs: number, hash: Readonly<Record<string, string>>): Map<number, UsageCounts> {
  const hours = new Map<number, UsageCounts>();
  for (const [field, value] of Object.entries(hash)) {
    const hh = Number(field.slice(0, 2));
    const name = field.slice(3);
    const n = Number(value);
    if (field[2] !== ':' || !Number.isInteger(hh) || hh < 0 || hh > 23 || !Number.isFinite(n)) continue;
    const start = dayStartMs + hh * HOUR_MS;
    let c = hours.get(start);
    if (!c) {
      c = new UsageCounts();
      hours.set(start, c);
    }
    const numeric = BY_SHORT.get(name);
    if (numeric) c[numeric] += n;
    else if (name.startsWith(REFUSAL_PREFIX)) {
      const code = name.slice(REFUSAL_PREFIX.length) as ErrorCode;
      c.refusals[code] = (c.refusals[code] ?? 0) + n;
    }
  }
  return hours;
}

/** Start of the UTC bucket of `granularity` holding `ms`. */
export function bucketStart(ms: number, granularity: Granularity): number {
  if (granularity === 'hour') return ms - (((ms % HOUR_MS) + HOUR_MS) % HOUR_MS);
  const d = new Date(ms);
  return granularity === 'day' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** `yyyymmdd` of the UTC day holding `ms`. */
export function dayId(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10).replaceAll('-', '');
}

/** Hourly counts regrouped into buckets of `granularity`, in time order. */
export function rollUp(hours: ReadonlyMap<number, UsageCounts>, granularity: Granularity): Array<{ start: number; counts: UsageCounts }> {
  const buckets = new Map<number, UsageCounts>();
  for (const [hour, c] of hours) {
    const start = bucketStart(hour, granularity);
    let b = buckets.get(start);
    if (!b) {
      b = new UsageCounts();
      buckets.set(start, b);
    }
    b.add(c);
  }
  return [...buckets].sort((a, b) => a[0] - b[0]).map(([start, counts]) => ({ start, counts }));
}
