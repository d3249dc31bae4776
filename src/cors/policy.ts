/**
 * CORS decisions (docs/architecture.md), pure. A tenant's origin list is compiled once into a matcher and
 * fixed header strings; the stage only asks and copies.
 */

/** Methods a browser may use against Queen through the edge. */
export const CORS_ALLOWED_METHODS = 'GET, POST, PUT, DELETE, PATCH';
/** The same methods as tokens: a preflight's method must be one of them exactly (`GE` or `T, D` is not). */
const ALLOWED_METHOD_TOKENS: ReadonlySet<string> = new Set([...CORS_ALLOWED_METHODS.split(', '), 'OPTIONS']);
/** Request headers a browser may send (lower-case). */
export const CORS_ALLOWED_HEADERS: ReadonlySet<string> = new Set(['authorization', 'content-type', 'accept', 'traceparent', 'tracestate', 'x-request-id']);
export const CORS_EXPOSED_HEADERS = 'Retry-After, RateLimit, RateLimit-Policy, X-Request-Id';
export const CORS_MAX_AGE_SEC = '600';

export interface CorsPolicy {
  /** False when the tenant lists no origins: every cross-origin request is refused. */
  readonly enabled: boolean;
  allows(origin: string): boolean;
}

export type PreflightVerdict = { readonly allowed: true; readonly headers: Readonly<Record<string, string>> } | { readonly allowed: false };

const ORIGIN_RE = /^(https?):\/\/([a-z0-9.-]+|\[[0-9a-f:.]+\])(?::(\d{1,5}))?$/;

/**
 * Compiles origin entries: exact (`https://app.example.com[:port]`), one-level-or-deeper
 * wildcard (`https://*.example.com`, not matching the apex), or `*` for any origin.
 */
export function compileCorsPolicy(origins: readonly string[]): CorsPolicy {
  const exact = new Set<string>();
  const suffixes: { scheme: string; suffix: string; port: string }[] = [];
  let any = false;
  for (const o of origins) {
    const s = o.trim().toLowerCase().replace(/\/+$/, '');
    if (s === '*') any = true;
    else if (s.includes('://*.')) {
      const [scheme, rest] = s.split('://*.') as [string, string];
      const colon = rest.lastIndexOf(':');
      const hasPort = colon !== -1 && /^\d+$/.test(rest.slice(colon + 1));
      suffixes.push({ scheme, suffix: `.${hasPort ? rest.slice(0, colon) : rest}`, port: hasPort ? rest.slice(colon + 1) : '' });
    } else exact.add(s);
  }
  return Object.freeze({
    enabled: any || exact.size > 0 || suffixes.length > 0,
    allows(origin: string): boolean {
      const o = origin.toLowerCase();
      if (exact.has(o)) return true;
      const m = ORIGIN_RE.exec(o);
      if (!m) return false;
      if (any) return true;
      const [, scheme, hostname, port = ''] = m;
      for (const w of suffixes) {
        if (w.scheme === scheme && w.port === port && hostname!.length > w.suffix.length && hostname!.endsWith(w.suffix)) return true;
      }
      return false;
    },
  });
}

/** Answers a preflight: allowed origin and method, requested headers filtered to the allowlist. */
export function preflightVerdict(policy: CorsPolicy, origin: string, requestMethod: string, requestHeaders: string | undefined): PreflightVerdict {
  if (!policy.allows(origin)) return { allowed: false };
  const method = requestMethod.toUpperCase();
  if (!ALLOWED_METHOD_TOKENS.has(method)) return { allowed: false };
  const headers: Record<string, string> = {
    'access-control-allow-origin': origin,
    'access-control-allow-methods': CORS_ALLOWED_METHODS,
    'access-control-max-age': CORS_MAX_AGE_SEC,
    vary: 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers',
  };
  if (requestHeaders) {
    const allowed = requestHeaders
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter((h) => CORS_ALLOWED_HEADERS.has(h));
    if (allowed.length > 0) headers['access-control-allow-headers'] = allowed.join(', ');
  }
  return { allowed: true, headers };
}

/**
 * Headers for an actual (non-preflight) response to an allowed origin. Timing-Allow-Origin lets the
 * page read Resource Timing details such as nextHopProtocol, which browsers blank cross-origin
 * without it; the origin may read the response already, so its timing tells it nothing new.
 */
export function actualResponseHeaders(origin: string): Readonly<Record<string, string>> {
  return {
    'access-control-allow-origin': origin,
    'access-control-expose-headers': CORS_EXPOSED_HEADERS,
    'timing-allow-origin': origin,
    vary: 'Origin',
  };
}

/** Removes what actualResponseHeaders added (Vary stays: the answer still depends on Origin). */
export function withoutActualResponseHeaders(headers: Record<string, string>): void {
  delete headers['access-control-allow-origin'];
  delete headers['access-control-expose-headers'];
  delete headers['timing-allow-origin'];
}
