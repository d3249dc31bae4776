/**
 * The query parameters each route declares, and the one reading of a query (docs/reference.md,
 * docs/security.md "One reading"). The edge parses the client's query against the route's
 * declaration, refuses what it does not declare, applies the caps, and forwards a query it rebuilt
 * from what it parsed, never the client's bytes.
 *
 * Queen brokers read a parameter by searching the raw query for the first `name=` anywhere in it
 * (so `xwait=true` reads as `wait=true`), then decode `%XX` and `+` (a space). The rebuilt query
 * makes that search land on the edge's own pair for every declared name: values are percent-encoded
 * (no `=`, `&` or `+` inside them), and names are written shortest first, so a name that ends
 * another comes before it; a declared name that is a proper suffix of another declared name of the
 * same route is not allowed (a test checks the table), since its absence would let the longer pair
 * answer for it.
 */
import { edgeError, type EdgeError } from '../errors.js';

/**
 * `int`: a decimal from 0 to 2^31-1 (the broker's `std::stoi`); `bool`: read as the broker reads it
 * (`true` or `1` is true, an empty value is the broker's default, anything else is false; see
 * `readBool`); `string`: any text.
 */
export type ParamKind = 'int' | 'bool' | 'string';

export interface LongPollSettings {
  readonly defaultTimeoutMs: number;
  readonly maxTimeoutMs: number;
}

/** Largest value of `limit` on the list routes: one request may not ask the broker for an unbounded page. */
export const MAX_LIST_LIMIT = 1000;
/** Largest `partitions` of one pop (also never above the plan's maxBatch): each claimed partition is a lease and a scan at the broker. */
export const MAX_POP_PARTITIONS = 100;
/** Longest accepted string value (characters, decoded). */
export const MAX_QUERY_VALUE_LENGTH = 1024;
const INT_MAX = 2 ** 31 - 1;

export type Params = Readonly<Record<string, ParamKind>>;

/** What pops read (broker pop.cpp; `namespace`/`task`/`leaseSeconds` are the seed's and Queen's clients send them). */
const POP: Params = {
  batch: 'int',
  partitions: 'int',
  wait: 'bool',
  timeout: 'int',
  consumerGroup: 'string',
  autoAck: 'bool',
  leaseSeconds: 'int',
  subscriptionMode: 'string',
  subscriptionFrom: 'string',
  namespace: 'string',
  task: 'string',
};
const PAGE: Params = { limit: 'int', offset: 'int' };
const RANGE: Params = { from: 'string', to: 'string' };
const SCOPE: Params = { queue: 'string', namespace: 'string', task: 'string' };
const RANGE_QUEUE: Params = { ...RANGE, queue: 'string' };

/**
 * Route name -> its parameters: what broker 0.15.1's handler reads (server/src/routes/*.cpp), plus
 * what Queen's clients send that the broker ignores (kept so their requests are not refused). A
 * route that shares a name across several broker routes (`/x/**`) declares their union.
 */
export const QUERY_PARAMS: Readonly<Record<string, Params>> = {
  'pop.queue': POP,
  'pop.partition': POP,
  'pop.namespace': POP,
  'consumer-groups.read': { minLagSeconds: 'int' },
  'consumer-groups.delete': { deleteMetadata: 'bool' },
  'resources.read': { ...PAGE, namespace: 'string', task: 'string', search: 'string' },
  'messages.read': { ...PAGE, ...RANGE, queue: 'string', partition: 'string', ns: 'string', task: 'string', status: 'string', consumerGroup: 'string' },
  'dlq.read': { ...PAGE, ...RANGE, queue: 'string', partition: 'string', consumerGroup: 'string' },
  'status.queues': { ...PAGE, ...RANGE, ...SCOPE, includePartitions: 'bool' },
  'status.analytics': { ...RANGE, ...SCOPE, interval: 'string' },
  'analytics.queue-lag': RANGE_QUEUE,
  'analytics.queue-ops': RANGE_QUEUE,
  'analytics.queue-parked-replicas': RANGE_QUEUE,
  'analytics.retention': RANGE_QUEUE,
  'traces.read': { ...PAGE, ...RANGE, search: 'string' },
};

const NONE: Params = {};

/** The declared parameters of a route, with the operator's extra names (strings) from `queryAllow`. */
export function declaredParams(route: string, extra: readonly string[] = []): Params {
  const own = QUERY_PARAMS[route] ?? NONE;
  if (extra.length === 0) return own;
  const out: Record<string, ParamKind> = { ...own };
  // Own keys only: a name such as `constructor` is inherited by every object.
  for (const name of extra) if (!Object.hasOwn(out, name)) out[name] = 'string';
  return out;
}

/** Names in a declaration where one is a proper suffix of another: the broker's search would confuse them. */
export function suffixClashes(names: readonly string[]): string[] {
  const out: string[] = [];
  for (const a of names) for (const b of names) if (a !== b && b.endsWith(a)) out.push(`"${a}" ends "${b}"`);
  return out;
}

/** Config problems of a `queryAllow:` map: unknown routes, names that clash with the route's own. */
export function queryAllowProblems(allow: Readonly<Record<string, readonly string[]>>, routeNames: ReadonlySet<string>): string[] {
  const problems: string[] = [];
  for (const [route, names] of Object.entries(allow)) {
    if (!routeNames.has(route)) {
      problems.push(`queryAllow.${route}: no such route`);
      continue;
    }
    for (const clash of suffixClashes(Object.keys(declaredParams(route, names)))) problems.push(`queryAllow.${route}: ${clash}`);
  }
  return problems;
}

export interface QueryFacts {
  /** Each parameter's value as the edge read it (and the broker will), by name. */
  readonly values: ReadonlyMap<string, string>;
  /** `wait=true` on a route that parks. */
  readonly wait: boolean;
  /** Effective long-poll timeout (ms) when `wait`. */
  readonly timeoutMs: number;
  /** Query to forward (without `?`), rebuilt from `values`. */
  readonly forward: string;
}

export interface QueryRules {
  readonly params: Params;
  /** The route parks with `wait=true`; elsewhere `wait` is forwarded false, so no broker parks it without a slot. */
  readonly longPoll: boolean;
  readonly maxBatch: number;
  readonly longPollSettings: LongPollSettings;
}

const UINT = /^\d{1,10}$/;

/** Form decoding (`+` is a space, as the broker reads it); null when a `%` escape is malformed. */
function decode(s: string): string | null {
  if (!s.includes('%') && !s.includes('+')) return s;
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return null;
  }
}

/**
 * A boolean as broker 0.15.1's `get_query_param_bool` reads it: `true` and `1` are true, every other
 * non-empty value (`True`, `yes`, `0`) is false. Queen's clients spell booleans their language's
 * way (Python's urlencode sends `True`, PHP's http_build_query `1`), and the broker decides; the
 * edge decides the same and forwards its canonical `true`/`false`, so both read one value. An empty
 * value is the broker's default: `readQuery` leaves the parameter out of what it forwards.
 */
export function readBool(raw: string): 'true' | 'false' {
  return raw === 'true' || raw === '1' ? 'true' : 'false';
}

/** One parameter's value normalised to the form forwarded, or a refusal naming it. */
function canonical(name: string, kind: ParamKind, raw: string): string | EdgeError {
  if (kind === 'string') {
    return raw.length > MAX_QUERY_VALUE_LENGTH
      ? edgeError('invalid_request', `query parameter "${name}" is longer than ${MAX_QUERY_VALUE_LENGTH} characters`)
      : raw;
  }
  if (kind === 'bool') return readBool(raw);
  if (!UINT.test(raw) || Number(raw) > INT_MAX) return edgeError('invalid_request', `query parameter "${name}" must be an integer from 0 to ${INT_MAX}`);
  return String(Number(raw));
}

/** The caps of named parameters: values out of range are refused, a long-poll timeout is capped. */
function capped(name: string, value: string, r: QueryRules): string | EdgeError {
  const n = Number(value);
  switch (name) {
    case 'batch':
      if (n < 1) return edgeError('invalid_request', '"batch" must be a positive integer');
      if (n > r.maxBatch) return edgeError('invalid_request', `"batch" exceeds the plan's maximum of ${r.maxBatch}`);
      return value;
    case 'partitions': {
      const max = Math.min(r.maxBatch, MAX_POP_PARTITIONS);
      if (n < 1) return edgeError('invalid_request', '"partitions" must be a positive integer');
      if (n > max) return edgeError('invalid_request', `"partitions" exceeds the maximum of ${max}`);
      return value;
    }
    case 'limit':
      return n > MAX_LIST_LIMIT ? edgeError('invalid_request', `"limit" exceeds the maximum of ${MAX_LIST_LIMIT}`) : value;
    case 'wait':
      return r.longPoll ? value : 'false';
    default:
      return value;
  }
}

/**
 * Parses a raw query (without `?`) against a route's rules: every name declared, given once, of its
 * kind and within its cap; then rebuilds the query to forward.
 */
export function readQuery(raw: string, r: QueryRules): QueryFacts | EdgeError {
  const values = new Map<string, string>();
  // Booleans given empty: absent to the broker (its default applies), still given once.
  let emptyBools: string[] | undefined;
  if (raw !== '') {
    for (const pair of raw.split('&')) {
      if (pair === '') continue;
      const eq = pair.indexOf('=');
      const name = decode(eq === -1 ? pair : pair.slice(0, eq));
      const value = eq === -1 ? '' : decode(pair.slice(eq + 1));
      if (name === null || value === null) return edgeError('invalid_request', 'malformed percent-encoding in query');
      const kind = Object.hasOwn(r.params, name) ? r.params[name] : undefined;
      if (kind === undefined) return edgeError('invalid_request', `query parameter "${name.slice(0, 64)}" is not accepted on this route`);
      if (values.has(name) || emptyBools?.includes(name)) return edgeError('invalid_request', `query parameter "${name}" given more than once`);
      if (kind === 'bool' && value === '') {
        if (emptyBools === undefined) emptyBools = [];
        emptyBools.push(name);
        continue;
      }
      const v = canonical(name, kind, value);
      if (typeof v !== 'string') return v;
      const c = capped(name, v, r);
      if (typeof c !== 'string') return c;
      values.set(name, c);
    }
  }
  const wait = r.longPoll && values.get('wait') === 'true';
  let timeoutMs = 0;
  if (wait) {
    const asked = values.get('timeout');
    timeoutMs = Math.min(asked === undefined ? r.longPollSettings.defaultTimeoutMs : Number(asked), r.longPollSettings.maxTimeoutMs);
    // Always explicit: the broker's own default may exceed the edge's maximum.
    values.set('timeout', String(timeoutMs));
  }
  return { values, wait, timeoutMs, forward: writeQuery(values) };
}

/** Shortest name first, then by name; each value percent-encoded (a space as %20, never `+`). */
export function writeQuery(values: ReadonlyMap<string, string>): string {
  const names = [...values.keys()].sort((a, b) => a.length - b.length || (a < b ? -1 : a > b ? 1 : 0));
  return names.map((n) => `${n}=${encodeURIComponent(values.get(n)!)}`).join('&');
}
