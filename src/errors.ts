/**
 * The refusal catalogues (docs/limits.md, docs/operating.md). Errors are values: decisions return
 * an EdgeError, and renderError() is the one function that turns any refusal, a tenant's or an
 * operator's, into JSON. Throwing is reserved for bugs.
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
  request_timeout: { status: 408, message: 'request body not received in time' },
  edge_overloaded: { status: 503, message: 'too many request bodies in flight on this instance' },
} as const satisfies Record<string, { status: number; message: string }>;

/** A code a tenant's request can end with: metered, exported and listed in docs/reference.md. */
export type ErrorCode = keyof typeof ERROR_CATALOGUE;

/**
 * Codes only the admin API answers with. Kept out of ERROR_CATALOGUE because its keys are
 * contracts for tenants (the usage export's refusal columns, the client reference), which an
 * operator's refusal must not change. The admin API also answers with `invalid_request` and
 * `unauthorized` from the client catalogue (same status there).
 */
export const OPERATOR_ERRORS = {
  not_found: { status: 404, message: 'not found' },
  /** No server.admin.token: 404 as if absent; the code lets the CLI say how to turn the API on. */
  admin_disabled: { status: 404, message: 'the admin API is off: no server.admin.token configured' },
  read_only: { status: 409, message: 'no Redis configured: tenants and plans come from the config file only' },
  conflict: { status: 409, message: 'conflict' },
  unavailable: { status: 503, message: 'tenant or usage store unavailable (Redis)' },
  /** The durable store (store.url) did not answer: the write was not made; serving goes on from memory. */
  store_unavailable: { status: 503, message: 'durable store unavailable: admin writes are refused until it is back (docs/store.md)' },
} as const satisfies Record<string, { status: number; message: string }> & { readonly [K in ErrorCode]?: never };

export type OperatorErrorCode = keyof typeof OPERATOR_ERRORS;
export type AnyErrorCode = ErrorCode | OperatorErrorCode;

const CATALOGUE: Readonly<Record<AnyErrorCode, { readonly status: number; readonly message: string }>> = { ...ERROR_CATALOGUE, ...OPERATOR_ERRORS };

/**
 * A refusal: a status, a stable code, a human message, optional extra headers, and for a body
 * that failed validation every problem by path. `EdgeError` alone means a client code, so the
 * request path (and with it metering) cannot be handed an operator's refusal.
 */
export class EdgeError<C extends AnyErrorCode = ErrorCode> {
  readonly status: number;
  constructor(
    readonly code: C,
    readonly message: string = CATALOGUE[code].message,
    /** Seconds for Retry-After (429s). */
    readonly retryAfterSec?: number,
    /** Extra response headers, e.g. RateLimit fields or WWW-Authenticate. */
    readonly headers?: Readonly<Record<string, string>>,
    /** `path: message` for each problem of an invalid body (admin writes). */
    readonly problems?: readonly string[],
  ) {
    this.status = CATALOGUE[code].status;
  }
}

export interface EdgeErrorExtra {
  retryAfterSec?: number;
  headers?: Record<string, string>;
  problems?: readonly string[];
}

/** Builds a refusal; the message defaults to the catalogue's. */
export function edgeError(code: ErrorCode, message?: string, extra?: EdgeErrorExtra): EdgeError;
export function edgeError(code: AnyErrorCode, message?: string, extra?: EdgeErrorExtra): EdgeError<AnyErrorCode>;
export function edgeError(code: AnyErrorCode, message?: string, extra?: EdgeErrorExtra): EdgeError<AnyErrorCode> {
  return new EdgeError(code, message ?? CATALOGUE[code].message, extra?.retryAfterSec, extra?.headers, extra?.problems);
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

/** The one function that turns a refusal into the seed's `{"error","code"}` JSON (`problems` after them when set). */
export function renderError(err: EdgeError<AnyErrorCode>): RenderedError {
  // One check and the same two-field object for every refusal without problems (the 429s under load).
  const body = JSON.stringify(
    err.problems === undefined ? { error: err.message, code: err.code } : { error: err.message, code: err.code, problems: err.problems },
  );
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
