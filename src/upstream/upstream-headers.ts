/**
 * Request headers for the broker (docs/architecture.md), pure: an allowlist, never a denylist, so cookies,
 * hop-by-hop headers, the client's Host and any client-sent x-queen-tenant or x-forwarded-* never
 * reach a broker.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { edgeError, type EdgeError } from '../errors.js';

/**
 * Client headers copied upstream as they are (trace context too, once validated). Broker 0.15.1
 * reads no request header but `authorization` (auth/auth_middleware.cpp) and the body framing,
 * which the edge writes itself; Accept-Encoding is the edge's own (identity, below).
 */
const FORWARDED: readonly string[] = ['content-type', 'accept'];

/** W3C Trace Context `traceparent`: version, trace-id, parent-id, flags; a future version may append fields. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?$/;
/** One `tracestate` list member: simple or multi-tenant key, `=`, a value of printable ASCII without `,` or `=`. */
const TRACESTATE_MEMBER =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const TRACESTATE_MAX_MEMBERS = 32;
const TRACESTATE_MAX_LENGTH = 512;

export interface UpstreamHeaderFacts {
  readonly clientIp: string;
  readonly proto: 'https' | 'http';
  /** The host the edge resolved the tenant by (normalised), or null when none matched: never the raw Host. */
  readonly host: string | null;
  readonly requestId: string;
  /** Trust the client's X-Forwarded-For (a trusted load balancer in front). */
  readonly trustProxy: boolean;
  /** Authorization value for the broker, or null for none. */
  readonly authorization: string | null;
  /** x-queen-tenant value, or null. */
  readonly tenantHeader: string | null;
  readonly contentLength: number | null;
}

export function upstreamHeaders(client: IncomingHttpHeaders, f: UpstreamHeaderFacts): Record<string, string> {
  // Answers the edge meters and relays must be readable: a broker (or a proxy in front of one) that
  // compresses would hand metering bytes it cannot count.
  const out: Record<string, string> = { 'accept-encoding': 'identity' };
  for (let i = 0; i < FORWARDED.length; i++) {
    const name = FORWARDED[i]!;
    const v = client[name];
    if (typeof v === 'string') out[name] = v;
  }
  const traceparent = client.traceparent;
  if (typeof traceparent === 'string' && validTraceparent(traceparent)) {
    out.traceparent = traceparent;
    // tracestate means nothing without the traceparent it belongs to.
    const tracestate = client.tracestate;
    if (typeof tracestate === 'string' && validTracestate(tracestate)) out.tracestate = tracestate;
  }
  const xff = client['x-forwarded-for'];
  out['x-forwarded-for'] = f.trustProxy && typeof xff === 'string' && xff !== '' ? `${xff}, ${f.clientIp}` : f.clientIp;
  out['x-forwarded-proto'] = f.proto;
  if (f.host !== null) out['x-forwarded-host'] = f.host;
  out['x-request-id'] = f.requestId;
  if (f.authorization !== null) out.authorization = f.authorization;
  if (f.tenantHeader !== null) out['x-queen-tenant'] = f.tenantHeader;
  if (f.contentLength !== null) out['content-length'] = String(f.contentLength);
  return out;
}

/**
 * A request body must arrive as the bytes it means: the edge counts and parses bodies as sent and
 * never decodes them, so any Content-Encoding but identity is refused rather than forwarded as
 * bytes the broker would read differently (or not at all).
 */
export function contentEncodingRefusal(client: IncomingHttpHeaders): EdgeError | null {
  const v = client['content-encoding'];
  if (v === undefined || v.trim().toLowerCase() === 'identity' || v.trim() === '') return null;
  return edgeError('invalid_request', `Content-Encoding "${v.slice(0, 32)}" is not supported: send the body uncompressed`);
}

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
