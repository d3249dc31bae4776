/**
 * The refusal catalogue (docs/limits.md). Errors are values: decisions return an EdgeError, the
 * pipeline renders it with renderError(). Throwing is reserved for bugs.
 */

/** Every code a client may see, with its HTTP status and default message. */
export const ERROR_CATALOGUE = {
  invalid_request: { status: 400, message: 'invalid request' },
  unauthorized: { status: 401, message: 'missing or invalid token' },
  forbidden: { status: 403, message: 'forbidden' },
  cluster_suspended: { status: 403, message: 'cluster suspended' },
  feature_gated: { status: 403, message: 'feature not in plan' },
  storage_quota_exceeded: { status: 403, message: 'storage quota exceeded' },
  route_not_found: { status: 404, message: 'route not found' },
  payload_too_large: { status: 413, message: 'payload too large' },
  rate_limited: { status: 429, message: 'rate limit exceeded' },
  quota_exceeded: { status: 429, message: 'quota exceeded' },
  bad_gateway: { status: 502, message: 'broker connection failed' },
  no_upstream: { status: 503, message: 'no healthy broker' },
  limiter_unavailable: { status: 503, message: 'limiter unavailable' },
  upstream_timeout: { status: 504, message: 'broker did not answer in time' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CATALOGUE;

/** A refusal: a status, a stable code, a human message, and optional extra headers. */
export class EdgeError {
  readonly status: number;
  constructor(
    readonly code: ErrorCode,
    readonly message: string = ERROR_CATALOGUE[code].message,
    /** Seconds for Retry-After (429s). */
    readonly retryAfterSec?: number,
    /** Extra response headers, e.g. RateLimit fields or WWW-Authenticate. */
    readonly headers?: Readonly<Record<string, string>>,
  ) {
    this.status = ERROR_CATALOGUE[code].status;
  }
}

/** Builds a refusal; the message defaults to the catalogue's. */
export function edgeError(
  code: ErrorCode,
  message?: string,
  extra?: { retryAfterSec?: number; headers?: Record<string, string> },
): EdgeError {
  return new EdgeError(code, message ?? ERROR_CATALOGUE[code].message, extra?.retryAfterSec, extra?.headers);
}

export function isEdgeError(v: unknown): v is EdgeError {
  return v instanceof EdgeError;
}

/** A rendered refusal, ready to write. */
export interface RenderedError {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** The one function that turns a refusal into the seed's `{"error","code"}` JSON. */
export function renderError(err: EdgeError): RenderedError {
  const body = JSON.stringify({ error: err.message, code: err.code });
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'content-length': String(Buffer.byteLength(body)),
    'cache-control': 'no-store',
  };
  if (err.retryAfterSec !== undefined) headers['retry-after'] = String(Math.max(1, Math.ceil(err.retryAfterSec)));
  if (err.code === 'unauthorized' && !err.headers?.['www-authenticate']) headers['www-authenticate'] = 'Bearer';
  if (err.headers) Object.assign(headers, err.headers);
  return { status: err.status, headers, body };
}
