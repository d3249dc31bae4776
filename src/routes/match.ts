/**
 * Path normalisation and route matching (docs/architecture.md). Pure: a request target in, a route and a
 * canonical path out. The canonical path is what the broker receives, so the proxy and the broker
 * can never disagree about which route a request is.
 */
import FindMyWay from 'find-my-way';
import { edgeError, type EdgeError } from '../errors.js';
import type { Method, RouteSpec } from './table.js';

export interface NormalizedTarget {
  /** Canonical path: dot segments resolved, empty segments dropped, each segment re-encoded. */
  readonly path: string;
  /** Query string without `?` ('' when none), as received but for bytes outside RFC 3986 query characters, escaped. */
  readonly query: string;
}

/** Longest path accepted; longer is refused before any work. */
export const MAX_PATH_LENGTH = 4096;

const SEGMENT_SAFE = /^[A-Za-z0-9\-._~!$&'()*+,;=:@]*$/;
/** A raw byte that is neither pchar, `%` nor `/`: it is escaped before decoding. */
const RAW_UNSAFE = /[^A-Za-z0-9\-._~!$&'()*+,;=:@%/]/g;
/**
 * A raw query byte that is neither a query character nor `%`: `#` above all, which a WHATWG URL
 * parser at the broker takes for the start of a fragment, dropping every parameter after it that
 * the edge read (a parked pop's `timeout`).
 */
const QUERY_UNSAFE = /[^A-Za-z0-9\-._~!$&'()*+,;=:@%/?]/g;
/**
 * Anything that keeps a path from being forwarded as it is: a byte outside pchar and `/` (`%`
 * included), a dot-segment start, an empty segment, a trailing `/`. One regex pass (faster than a
 * char loop in JS).
 */
const NOT_CANONICAL = /[^A-Za-z0-9\-._~!$&'()*+,;=:@/]|\/[./]|\/$/;

/** Percent-encodes a decoded segment canonically (RFC 3986 pchar); `/` stays encoded. */
function encodeSegment(s: string): string {
  if (SEGMENT_SAFE.test(s)) return s;
  return encodeURIComponent(s).replace(/%(24|26|2B|2C|3B|3D|3A|40)/g, (m) => decodeURIComponent(m));
}

/**
 * Escapes a raw byte outside pchar (or the query's characters) as the client sent it (`\` -> `%5C`, a raw UTF-8 byte -> its
 * `%XX`), so it decodes as that byte and no parser downstream can read it as a separator (WHATWG
 * URL turns `\` into `/` and ends the path at `#`).
 */
function escapeRaw(c: string): string {
  const code = c.charCodeAt(0);
  // Node hands the request target over as latin1, one char per byte; anything wider is UTF-8 encoded.
  return code < 0x100 ? `%${code < 16 ? '0' : ''}${code.toString(16).toUpperCase()}` : encodeURIComponent(c);
}

/**
 * Normalises a request target once: percent-decoding per segment (so `%2F` stays inside its
 * segment), `.`/`..` removed (also when written `%2e%2e`), `//` collapsed, never above the root,
 * every byte outside pchar percent-encoded. The result is what the access check matches and what
 * the broker receives, and every URL parser reads it as the same segments (docs/security.md).
 */
export function normalizeTarget(target: string): NormalizedTarget | EdgeError {
  if (target.length > MAX_PATH_LENGTH) return edgeError('invalid_request', 'request target too long');
  if (target.charCodeAt(0) !== 47 /* / */) return edgeError('invalid_request', 'request target must be a path');
  const q = target.indexOf('?');
  const rawPath = q === -1 ? target : target.slice(0, q);
  const query = q === -1 ? '' : target.slice(q + 1).replace(QUERY_UNSAFE, escapeRaw);
  if (rawPath === '/' || !NOT_CANONICAL.test(rawPath)) return { path: rawPath, query };
  const out: string[] = [];
  const parts = rawPath.replace(RAW_UNSAFE, escapeRaw).split('/');
  for (let i = 1; i < parts.length; i++) {
    let seg: string;
    try {
      seg = decodeURIComponent(parts[i]!);
    } catch {
      return edgeError('invalid_request', 'malformed percent-encoding in path');
    }
    if (seg === '' || seg === '.') continue;
    if (seg === '..') {
      out.pop();
      continue;
    }
    try {
      out.push(encodeSegment(seg));
    } catch {
      // A lone surrogate has no UTF-8 encoding.
      return edgeError('invalid_request', 'malformed path');
    }
  }
  return { path: `/${out.join('/')}`, query };
}

export interface RouteMatch {
  readonly route: RouteSpec;
  readonly params: Readonly<Record<string, string | undefined>>;
}

/** A compiled route table: find-my-way over the RouteSpecs. */
export interface RouteMatcher {
  match(method: string, path: string): RouteMatch | undefined;
}

export function compileRoutes(routes: readonly RouteSpec[]): RouteMatcher {
  const router = FindMyWay({ caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false, maxParamLength: 1024 });
  const noop = () => undefined;
  for (const r of routes) {
    for (const m of r.methods) router.on(m, r.path, noop, r);
  }
  return {
    match(method: string, path: string): RouteMatch | undefined {
      const found = router.find(method as Method, path);
      if (!found) return undefined;
      return { route: found.store as RouteSpec, params: found.params };
    },
  };
}
