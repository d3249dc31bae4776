/**
 * Request headers for the broker (DESIGN §1.11), pure: an allowlist, never a denylist, so cookies,
 * hop-by-hop headers, the client's Host and any client-sent x-queen-tenant or x-forwarded-* never
 * reach a broker.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** Client headers copied upstream as they are. */
const FORWARDED: readonly string[] = ['content-type', 'accept', 'accept-encoding', 'traceparent', 'tracestate'];

export interface UpstreamHeaderFacts {
  readonly clientIp: string;
  readonly proto: 'https' | 'http';
  readonly host: string;
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
  const out: Record<string, string> = {};
  for (let i = 0; i < FORWARDED.length; i++) {
    const name = FORWARDED[i]!;
    const v = client[name];
    if (typeof v === 'string') out[name] = v;
  }
  const xff = client['x-forwarded-for'];
  out['x-forwarded-for'] = f.trustProxy && typeof xff === 'string' && xff !== '' ? `${xff}, ${f.clientIp}` : f.clientIp;
  out['x-forwarded-proto'] = f.proto;
  out['x-forwarded-host'] = f.host;
  out['x-request-id'] = f.requestId;
  if (f.authorization !== null) out.authorization = f.authorization;
  if (f.tenantHeader !== null) out['x-queen-tenant'] = f.tenantHeader;
  if (f.contentLength !== null) out['content-length'] = String(f.contentLength);
  return out;
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** A client-sent X-Request-Id is kept when it is short and plain; otherwise undefined. */
export function acceptableRequestId(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' && REQUEST_ID.test(v) ? v : undefined;
}
