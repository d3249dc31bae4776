/**
 * W3C Trace Context and Baggage headers, checked before anything reads them: what the edge relays
 * to a broker and what its own spans join (observability/tracing.ts). Pure.
 */

/** W3C Trace Context `traceparent`: version, trace-id, parent-id, flags; a future version may append fields. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$/;
/** One `tracestate` list member: simple or multi-tenant key, `=`, a value of printable ASCII without `,` or `=`. */
const TRACESTATE_MEMBER =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const TRACESTATE_MAX_MEMBERS = 32;
const TRACESTATE_MAX_LENGTH = 512;
/** W3C Baggage: at most 8192 bytes, printable ASCII (the list's own syntax is the reader's to check). */
const BAGGAGE_MAX_LENGTH = 8192;
const BAGGAGE = /^[\x20-\x7e]*$/;

/**
 * W3C rules: version `ff` is invalid, version 00 is exactly 55 chars, an all-zero trace-id or
 * parent-id is invalid. Anything else would reach the broker's tracing as the client wrote it.
 */
export function validTraceparent(v: string): boolean {
  const m = TRACEPARENT.exec(v);
  if (m === null || m[1] === 'ff' || (m[1] === '00' && v.length !== 55)) return false;
  return !/^0+$/.test(m[2]!) && !/^0+$/.test(m[3]!);
}

/** At most 32 well-formed members (empty ones allowed) in at most 512 chars. */
export function validTracestate(v: string): boolean {
  if (v.length > TRACESTATE_MAX_LENGTH) return false;
  const members = v.split(',');
  if (members.length > TRACESTATE_MAX_MEMBERS) return false;
  for (const m of members) {
    const t = m.trim();
    if (t !== '' && !TRACESTATE_MEMBER.test(t)) return false;
  }
  return true;
}

/** A baggage header the edge may relay as it is (`tracing.forwardBaggage`). */
export function validBaggage(v: string): boolean {
  return v.length <= BAGGAGE_MAX_LENGTH && BAGGAGE.test(v);
}
