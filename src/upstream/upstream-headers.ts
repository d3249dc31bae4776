/**
 * Request headers for the broker (docs/architecture.md), pure: an allowlist, never a denylist, so cookies,
 * hop-by-hop headers, the client's Host and any client-sent x-queen-tenant or x-forwarded-* never
 * reach a broker.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { edgeError, type EdgeError } from '../errors.js';
import { validBaggage, validTraceparent, validTracestate } from '../observability/trace-context.js';

export { validTraceparent, validTracestate };

/**
 * Client headers copied upstream as they are (trace context too, once validated). Broker 0.15.1
 * reads no request header but `authorization` (auth/auth_middleware.cpp) and the body framing,
 * which the edge writes itself; Accept-Encoding is the edge's own (identity, below).
 */
const FORWARDED: readonly string[] = ['content-type', 'accept'];

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
  /** Relay the client's `baggage` (`tracing.forwardBaggage`): off, it never reaches a broker. */
  readonly baggage: boolean;
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
  const baggage = client.baggage;
  if (f.baggage && typeof baggage === 'string' && validBaggage(baggage)) out.baggage = baggage;
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
