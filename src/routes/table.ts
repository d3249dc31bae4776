/**
 * The route table (docs/reference.md) as data: every route the edge knows, with its access set and the flags the pipeline
 * branches on. Routes are data and one pipeline reads them; there are no per-route handlers.
 */
import type { BrokerVersion, Feature, Role } from '../config/schema.js';

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH';

/** How the lane key is derived (docs/clusters.md). */
export type LaneKind = 'push' | 'pop-queue' | 'pop-ns' | 'lease' | 'none';
/** What the proxy meters from the request and response (docs/operating.md). */
export type MeterKind = 'push' | 'pop' | 'ack' | 'transaction' | 'none';
/** What the proxy parses from the request body: only where it must read it. */
export type BodyKind = 'push' | 'transaction' | 'ack' | 'stream';
/** tenant: forwarded; operator: a broker route tenants never see; blocked: broker-internal. */
export type Exposure = 'tenant' | 'operator' | 'blocked';
/**
 * Which brokers answer a route: `0.15.1` and later (test/routes/broker-contract.test.ts holds the
 * table to broker 0.15.1's own registration), or `none` up to 0.15.1 (a route the broker contract
 * names that no broker release answered yet: forwarded only to brokers of `brokerVersion:
 * contract`, and it never takes a parked slot or counts as a pop).
 */
export type BrokerSupport = '0.15.1' | 'none';

/**
 * True when brokers of `version` register `r`. Broker 0.15.1 answers a route it lacks with an HTML
 * 404 a client cannot branch on, so the edge answers those itself.
 */
export function registeredBy(r: RouteSpec, version: BrokerVersion): boolean {
  return r.broker !== 'none' || version === 'contract';
}

export interface RouteSpec {
  /** Stable name for logs and metrics (never the raw path). */
  readonly name: string;
  readonly methods: readonly Method[];
  /** find-my-way pattern; `*` matches the rest of the path. */
  readonly path: string;
  /** Roles that may call it; `public` skips authentication. */
  readonly access: readonly Role[] | 'public';
  readonly exposure: Exposure;
  readonly feature: Feature | null;
  readonly lane: LaneKind;
  readonly meter: MeterKind;
  readonly body: BodyKind;
  /** Adds to what the tenant stores (messages, queues, state): subject to the storage gate. */
  readonly writes: boolean;
  /** A pop that may park with `wait=true`. */
  readonly longPoll: boolean;
  readonly broker: BrokerSupport;
}

const RO_RW_ADMIN: readonly Role[] = ['read-only', 'read-write', 'admin'];
const RW_ADMIN: readonly Role[] = ['read-write', 'admin'];
const RW: readonly Role[] = ['read-write'];
const RO_RW: readonly Role[] = ['read-only', 'read-write'];
const WO_RW: readonly Role[] = ['write-only', 'read-write'];
const ADMIN: readonly Role[] = ['admin'];
const ALL_METHODS: readonly Method[] = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH'];
/** Writes that add to storage; DELETE frees it, so a tenant over its storage quota can still delete. */
const STORING_METHODS: readonly Method[] = ['POST', 'PUT', 'PATCH'];

type Spec = Partial<RouteSpec> & Pick<RouteSpec, 'name' | 'methods' | 'path' | 'access'>;

function route(spec: Spec): RouteSpec {
  return Object.freeze({
    exposure: 'tenant',
    feature: null,
    lane: 'none',
    meter: 'none',
    body: 'stream',
    writes: false,
    longPoll: false,
    broker: '0.15.1',
    ...spec,
  } satisfies RouteSpec);
}

/** `/x/**`: the prefix itself and everything below it. */
function subtree(base: Spec): RouteSpec[] {
  return [route(base), route({ ...base, path: `${base.path}/*` })];
}

function hidden(name: string, path: string, exposure: Exposure): RouteSpec[] {
  const base: Spec = { name, methods: ALL_METHODS, path, access: ADMIN, exposure };
  return path.endsWith('/*') ? [route(base), route({ ...base, path: path.slice(0, -2) })] : [route(base)];
}

const ANALYTICS_TENANT = ['queue-lag', 'queue-ops', 'queue-parked-replicas', 'retention'];
const ANALYTICS_UNRELEASED = ['dlq-signatures', 'partition-liveness', 'workload'];
const ANALYTICS_OPERATOR = ['system-metrics', 'worker-metrics', 'postgres-stats'];

/** The default route table, in the order of docs/reference.md. */
export const ROUTES: readonly RouteSpec[] = Object.freeze([
  // Message plane.
  route({ name: 'push', methods: ['POST'], path: '/api/v1/push', access: WO_RW, lane: 'push', meter: 'push', body: 'push', writes: true }),
  route({ name: 'pop.queue', methods: ['GET'], path: '/api/v1/pop/queue/:queue', access: RW, lane: 'pop-queue', meter: 'pop', longPoll: true }),
  route({
    name: 'pop.partition',
    methods: ['GET'],
    path: '/api/v1/pop/queue/:queue/partition/:partition',
    access: RW,
    lane: 'pop-queue',
    meter: 'pop',
    longPoll: true,
  }),
  // The seed's pop by namespace or task: no broker up to 0.15.1 registers it (its own 404 answers), so
  // it is neither counted as a pop nor given a parked slot.
  route({ name: 'pop.namespace', methods: ['GET'], path: '/api/v1/pop', access: RW, lane: 'pop-ns', broker: 'none' }),
  route({ name: 'ack', methods: ['POST'], path: '/api/v1/ack', access: RW, lane: 'lease', meter: 'ack', body: 'ack' }),
  route({ name: 'ack.batch', methods: ['POST'], path: '/api/v1/ack/batch', access: RW, lane: 'lease', meter: 'ack', body: 'ack' }),
  route({ name: 'lease.extend', methods: ['POST'], path: '/api/v1/lease/:leaseId/extend', access: RW, lane: 'lease' }),
  route({
    name: 'transaction',
    methods: ['POST'],
    path: '/api/v1/transaction',
    access: RW,
    lane: 'lease',
    meter: 'transaction',
    body: 'transaction',
    writes: true,
  }),
  // Management writes.
  route({ name: 'configure', methods: ['POST'], path: '/api/v1/configure', access: RW_ADMIN, writes: true }),
  route({ name: 'consumer-groups.subscription', methods: ['POST'], path: '/api/v1/consumer-groups/:group/subscription', access: RW_ADMIN }),
  route({ name: 'consumer-groups.seek', methods: ['POST'], path: '/api/v1/consumer-groups/:group/queues/:queue/seek', access: RW_ADMIN }),
  route({ name: 'consumer-groups.seek', methods: ['POST'], path: '/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek', access: RW_ADMIN }),
  route({ name: 'messages.delete', methods: ['DELETE'], path: '/api/v1/messages/:partitionId/:transactionId', access: RW_ADMIN }),
  route({
    name: 'messages.retry',
    methods: ['POST'],
    path: '/api/v1/messages/:partitionId/:transactionId/retry',
    access: RW_ADMIN,
    writes: true,
    broker: 'none',
  }),
  route({ name: 'dlq.replay', methods: ['POST'], path: '/api/v1/dlq/:id/replay', access: RW_ADMIN, writes: true, broker: 'none' }),
  // Reads.
  ...subtree({ name: 'resources.read', methods: ['GET'], path: '/api/v1/resources', access: RO_RW_ADMIN }),
  ...subtree({ name: 'messages.read', methods: ['GET'], path: '/api/v1/messages', access: RO_RW_ADMIN }),
  route({ name: 'dlq.read', methods: ['GET'], path: '/api/v1/dlq', access: RO_RW_ADMIN }),
  ...subtree({ name: 'consumer-groups.read', methods: ['GET'], path: '/api/v1/consumer-groups', access: RO_RW_ADMIN }),
  ...subtree({ name: 'status.queues', methods: ['GET'], path: '/api/v1/status/queues', access: RO_RW_ADMIN }),
  route({ name: 'status.analytics', methods: ['GET'], path: '/api/v1/status/analytics', access: RO_RW_ADMIN }),
  ...ANALYTICS_TENANT.map((a) =>
    route({ name: `analytics.${a}`, methods: ['GET'], path: `/api/v1/analytics/${a}`, access: RO_RW_ADMIN, feature: 'analytics' }),
  ),
  ...ANALYTICS_UNRELEASED.map((a) =>
    route({ name: `analytics.${a}`, methods: ['GET'], path: `/api/v1/analytics/${a}`, access: RO_RW_ADMIN, feature: 'analytics', broker: 'none' }),
  ),
  ...subtree({ name: 'traces.read', methods: ['GET'], path: '/api/v1/traces', access: RO_RW_ADMIN, feature: 'traces' }),
  route({ name: 'traces.write', methods: ['POST'], path: '/api/v1/traces', access: RW, feature: 'traces', writes: true }),
  // Admin-only deletes.
  route({ name: 'queues.delete', methods: ['DELETE'], path: '/api/v1/resources/queues/:queue', access: ADMIN }),
  ...subtree({ name: 'consumer-groups.delete', methods: ['DELETE'], path: '/api/v1/consumer-groups', access: ADMIN }),
  route({ name: 'dlq.delete', methods: ['DELETE'], path: '/api/v1/dlq', access: ADMIN, broker: 'none' }),
  // Streams.
  route({ name: 'streams.queries', methods: ['POST'], path: '/streams/v1/queries', access: RW, feature: 'streams', writes: true }),
  route({ name: 'streams.cycle', methods: ['POST'], path: '/streams/v1/cycle', access: RW, feature: 'streams', writes: true }),
  route({ name: 'streams.state', methods: ['POST'], path: '/streams/v1/state/get', access: RO_RW, feature: 'streams' }),
  // Key-value, timers, ephemeral: reads read-only/read-write, writes read-write; producers may
  // create timers and push ephemeral messages. No broker up to 0.15.1 answers these. Every write is
  // storage-gated; an ephemeral push is metered, limited and billed like a push.
  ...subtree({ name: 'kv.read', methods: ['GET'], path: '/api/v1/kv', access: RO_RW, feature: 'kv', broker: 'none' }),
  ...subtree({ name: 'kv.write', methods: STORING_METHODS, path: '/api/v1/kv', access: RW, feature: 'kv', writes: true, broker: 'none' }),
  ...subtree({ name: 'kv.write', methods: ['DELETE'], path: '/api/v1/kv', access: RW, feature: 'kv', broker: 'none' }),
  route({ name: 'timers.create', methods: ['POST'], path: '/api/v1/timers', access: WO_RW, feature: 'timers', writes: true, broker: 'none' }),
  ...subtree({ name: 'timers.read', methods: ['GET'], path: '/api/v1/timers', access: RO_RW, feature: 'timers', broker: 'none' }),
  ...subtree({ name: 'timers.write', methods: ['PUT', 'PATCH'], path: '/api/v1/timers', access: RW, feature: 'timers', writes: true, broker: 'none' }),
  ...subtree({ name: 'timers.write', methods: ['DELETE'], path: '/api/v1/timers', access: RW, feature: 'timers', broker: 'none' }),
  route({ name: 'timers.write', methods: ['POST'], path: '/api/v1/timers/*', access: RW, feature: 'timers', writes: true, broker: 'none' }),
  route({
    name: 'ephemeral.push',
    methods: ['POST'],
    path: '/api/v1/ephemeral/push',
    access: WO_RW,
    feature: 'ephemeral',
    lane: 'push',
    meter: 'push',
    body: 'push',
    writes: true,
    broker: 'none',
  }),
  ...subtree({ name: 'ephemeral.read', methods: ['GET'], path: '/api/v1/ephemeral', access: RO_RW, feature: 'ephemeral', broker: 'none' }),
  ...subtree({ name: 'ephemeral.write', methods: STORING_METHODS, path: '/api/v1/ephemeral', access: RW, feature: 'ephemeral', writes: true, broker: 'none' }),
  ...subtree({ name: 'ephemeral.write', methods: ['DELETE'], path: '/api/v1/ephemeral', access: RW, feature: 'ephemeral', broker: 'none' }),
  // Public.
  route({ name: 'health', methods: ['GET'], path: '/health', access: 'public' }),
  // Operator only: exist on brokers, never exposed to tenants.
  ...hidden('operator.status', '/api/v1/status', 'operator'),
  ...hidden('operator.buffers', '/api/v1/status/buffers', 'operator'),
  ...ANALYTICS_OPERATOR.flatMap((a) => hidden(`operator.analytics.${a}`, `/api/v1/analytics/${a}`, 'operator')),
  ...hidden('operator.system', '/api/v1/system/*', 'operator'),
  ...hidden('operator.stats-refresh', '/api/v1/stats/refresh', 'operator'),
  // Blocked: broker-internal.
  ...hidden('blocked.internal', '/internal/*', 'blocked'),
  ...hidden('blocked.migration', '/api/v1/migration/*', 'blocked'),
  ...hidden('blocked.metrics', '/metrics', 'blocked'),
  ...hidden('blocked.metrics-prometheus', '/metrics/prometheus', 'blocked'),
]);

/**
 * Applies `routes:` overrides from the config (`"POST /api/v1/push": [write-only]`): the key is a
 * method and a pattern of the table; the value replaces the access set.
 */
export function applyRouteOverrides(
  table: readonly RouteSpec[],
  overrides: Readonly<Record<string, readonly Role[]>>,
): { routes: RouteSpec[]; problems: string[] } {
  const problems: string[] = [];
  const routes = table.slice();
  for (const [key, access] of Object.entries(overrides)) {
    const m = /^(GET|POST|PUT|DELETE|PATCH)\s+(\S+)$/.exec(key);
    if (!m) {
      problems.push(`routes.${key}: expected "METHOD /path"`);
      continue;
    }
    const method = m[1] as Method;
    const path = m[2]!.replace(/\/\*\*$/, '/*');
    let found = false;
    for (let i = 0; i < routes.length; i++) {
      const r = routes[i]!;
      if (r.exposure !== 'tenant' || !r.methods.includes(method) || (r.path !== path && r.path !== `${path}/*`)) continue;
      found = true;
      const others = r.methods.filter((x) => x !== method);
      routes[i] = route({ ...r, methods: [method], access: [...access] });
      if (others.length > 0) routes.push(route({ ...r, methods: others }));
    }
    if (!found) problems.push(`routes.${key}: no such tenant route`);
  }
  return { routes, problems };
}
