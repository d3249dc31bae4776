/**
 * Every route of Queen broker 0.15.1, with the edge's decision for it: forwarded to tenants,
 * operator-only (the admin listener or the broker's own network), blocked on purpose, or answered
 * by the edge itself (the dashboard, OPTIONS), and the query parameters its handler reads. The
 * route table must agree, so a broker route can neither be missed nor exposed by accident, nor
 * read a parameter the edge did not check.
 */
import { describe, expect, it } from 'vitest';
import { compileRoutes } from '../../src/routes/match.js';
import { declaredParams } from '../../src/routes/query-params.js';
import { registeredBy, ROUTES, type Exposure } from '../../src/routes/table.js';

/** `edge`: no route of the table; the edge answers itself (404, or a CORS preflight) and forwards nothing. */
type Decision = Exposure | `tenant:${string}` | 'edge';

const RANGE = ['from', 'to'];
const POP = ['consumerGroup', 'wait', 'timeout', 'batch', 'partitions', 'autoAck', 'subscriptionMode', 'subscriptionFrom'];

/**
 * The broker's routes as it registers them (server/src/routes/*.cpp, `app->get(...)`; `:x`
 * parameters), with the decision and the query parameters its handler reads (`get_query_param*`).
 * `tenant:<name>` names the edge route.
 */
const BROKER_0_15_1: ReadonlyArray<readonly [string, string, Decision, readonly string[]]> = [
  ['DELETE', '/api/v1/consumer-groups/:group', 'tenant:consumer-groups.delete', ['deleteMetadata']],
  ['DELETE', '/api/v1/consumer-groups/:group/queues/:queue', 'tenant:consumer-groups.delete', ['deleteMetadata']],
  ['DELETE', '/api/v1/messages/:partitionId/:transactionId', 'tenant:messages.delete', []],
  ['DELETE', '/api/v1/resources/queues/:queue', 'tenant:queues.delete', []],
  ['GET', '/', 'edge', []],
  ['GET', '/*', 'edge', []],
  ['GET', '/api/v1/analytics/postgres-stats', 'operator', []],
  ['GET', '/api/v1/analytics/queue-lag', 'tenant:analytics.queue-lag', [...RANGE, 'queue']],
  ['GET', '/api/v1/analytics/queue-ops', 'tenant:analytics.queue-ops', [...RANGE, 'queue']],
  ['GET', '/api/v1/analytics/queue-parked-replicas', 'tenant:analytics.queue-parked-replicas', [...RANGE, 'queue']],
  ['GET', '/api/v1/analytics/retention', 'tenant:analytics.retention', [...RANGE, 'queue']],
  ['GET', '/api/v1/analytics/system-metrics', 'operator', [...RANGE, 'hostname', 'workerId']],
  ['GET', '/api/v1/analytics/worker-metrics', 'operator', [...RANGE, 'hostname', 'workerId']],
  ['GET', '/api/v1/consumer-groups', 'tenant:consumer-groups.read', []],
  ['GET', '/api/v1/consumer-groups/:group', 'tenant:consumer-groups.read', []],
  ['GET', '/api/v1/consumer-groups/lagging', 'tenant:consumer-groups.read', ['minLagSeconds']],
  ['GET', '/api/v1/dlq', 'tenant:dlq.read', ['queue', 'consumerGroup', 'limit', 'offset']],
  ['GET', '/api/v1/messages', 'tenant:messages.read', ['queue', 'partition', 'ns', 'task', 'status', ...RANGE, 'limit', 'offset']],
  ['GET', '/api/v1/messages/:partitionId/:transactionId', 'tenant:messages.read', []],
  ['GET', '/api/v1/migration/status', 'blocked', []],
  ['GET', '/api/v1/pop/queue/:queue', 'tenant:pop.queue', POP],
  ['GET', '/api/v1/pop/queue/:queue/partition/:partition', 'tenant:pop.partition', POP],
  ['GET', '/api/v1/resources/namespaces', 'tenant:resources.read', []],
  ['GET', '/api/v1/resources/overview', 'tenant:resources.read', []],
  ['GET', '/api/v1/resources/queues', 'tenant:resources.read', []],
  ['GET', '/api/v1/resources/queues/:queue', 'tenant:resources.read', []],
  ['GET', '/api/v1/resources/tasks', 'tenant:resources.read', []],
  ['GET', '/api/v1/status', 'operator', [...RANGE, 'queue', 'namespace', 'task']],
  ['GET', '/api/v1/status/analytics', 'tenant:status.analytics', [...RANGE, 'queue', 'namespace', 'task', 'interval']],
  ['GET', '/api/v1/status/buffers', 'operator', []],
  ['GET', '/api/v1/status/queues', 'tenant:status.queues', [...RANGE, 'namespace', 'task', 'limit', 'offset']],
  ['GET', '/api/v1/status/queues/:queue', 'tenant:status.queues', []],
  ['GET', '/api/v1/status/queues/:queue/messages', 'tenant:status.queues', ['limit', 'offset']],
  ['GET', '/api/v1/system/maintenance', 'operator', []],
  ['GET', '/api/v1/system/maintenance/pop', 'operator', []],
  ['GET', '/api/v1/system/shared-state', 'operator', []],
  ['GET', '/api/v1/traces/:partitionId/:transactionId', 'tenant:traces.read', []],
  ['GET', '/api/v1/traces/by-name/:traceName', 'tenant:traces.read', ['limit', 'offset']],
  ['GET', '/api/v1/traces/names', 'tenant:traces.read', ['limit', 'offset']],
  ['GET', '/assets/*', 'edge', []],
  ['GET', '/health', 'tenant:health', []],
  ['GET', '/internal/api/inter-instance/stats', 'blocked', []],
  ['GET', '/internal/api/shared-state/stats', 'blocked', []],
  ['GET', '/metrics', 'blocked', []],
  ['GET', '/metrics/prometheus', 'blocked', []],
  ['OPTIONS', '/*', 'edge', []],
  ['POST', '/api/v1/ack', 'tenant:ack', []],
  ['POST', '/api/v1/ack/batch', 'tenant:ack.batch', []],
  ['POST', '/api/v1/configure', 'tenant:configure', []],
  ['POST', '/api/v1/consumer-groups/:group/queues/:queue/seek', 'tenant:consumer-groups.seek', []],
  ['POST', '/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek', 'tenant:consumer-groups.seek', []],
  ['POST', '/api/v1/consumer-groups/:group/subscription', 'tenant:consumer-groups.subscription', []],
  ['POST', '/api/v1/lease/:leaseId/extend', 'tenant:lease.extend', []],
  ['POST', '/api/v1/migration/reset', 'blocked', []],
  ['POST', '/api/v1/migration/start', 'blocked', []],
  ['POST', '/api/v1/migration/test-connection', 'blocked', []],
  ['POST', '/api/v1/migration/validate', 'blocked', []],
  ['POST', '/api/v1/push', 'tenant:push', []],
  ['POST', '/api/v1/stats/refresh', 'operator', []],
  ['POST', '/api/v1/system/maintenance', 'operator', []],
  ['POST', '/api/v1/system/maintenance/pop', 'operator', []],
  ['POST', '/api/v1/traces', 'tenant:traces.write', []],
  ['POST', '/api/v1/transaction', 'tenant:transaction', []],
  ['POST', '/internal/api/notify', 'blocked', []],
  ['POST', '/streams/v1/cycle', 'tenant:streams.cycle', []],
  ['POST', '/streams/v1/queries', 'tenant:streams.queries', []],
  ['POST', '/streams/v1/state/get', 'tenant:streams.state', []],
];

const matcher = compileRoutes(ROUTES);
/** A concrete path for a broker pattern: each `:param` becomes a plausible value. */
const concrete = (pattern: string) => pattern.replace(/:(\w+)/g, (_, name: string) => `${name}-1`).replace(/\*$/, 'app.js');

describe('the route table against broker 0.15.1', () => {
  it.each(BROKER_0_15_1)('%s %s: %s, reading %j', (method, pattern, decision, params) => {
    const m = matcher.match(method, concrete(pattern));
    if (decision === 'edge') {
      expect(m, 'no route of the table: the edge answers itself').toBeUndefined();
      return;
    }
    expect(m, 'the edge knows the route').toBeDefined();
    const [exposure, name] = decision.split(':') as [Exposure, string | undefined];
    expect(m!.route.exposure).toBe(exposure);
    if (name !== undefined) {
      expect(m!.route.name).toBe(name);
      expect(m!.route.methods).toContain(method);
      expect(m!.route.broker).toBe('0.15.1');
      // Every parameter the broker reads is one the edge declares, so it is parsed, capped and forwarded.
      const declared = Object.keys(declaredParams(name));
      expect(params.filter((p) => !declared.includes(p))).toEqual([]);
    }
  });

  it('a route no known broker answers takes no parked slot and is not metered as a pop', () => {
    for (const r of ROUTES.filter((x) => x.broker === 'none')) expect([r.name, r.longPoll, r.meter === 'pop']).toEqual([r.name, false, false]);
    expect(matcher.match('GET', '/api/v1/pop')!.route).toMatchObject({ name: 'pop.namespace', broker: 'none', longPoll: false, meter: 'none' });
  });

  it('brokers of 0.15.1 register exactly the routes of 0.15.1; brokers of the whole contract every route', () => {
    for (const r of ROUTES) {
      expect([r.name, registeredBy(r, '0.15.1')]).toEqual([r.name, r.broker === '0.15.1']);
      expect([r.name, registeredBy(r, 'contract')]).toEqual([r.name, true]);
    }
    expect(registeredBy(matcher.match('GET', '/api/v1/pop')!.route, '0.15.1')).toBe(false);
  });

  it('seek has the access set of subscription; the parked-replicas read is analytics for read roles', () => {
    const access = (method: string, path: string) => matcher.match(method, path)!.route;
    const sub = access('POST', '/api/v1/consumer-groups/g/subscription');
    for (const path of ['/api/v1/consumer-groups/g/queues/q/seek', '/api/v1/consumer-groups/g/queues/q/partitions/p/seek']) {
      expect(access('POST', path).access).toEqual(sub.access);
    }
    expect(matcher.match('POST', '/api/v1/consumer-groups/g/seek')).toBeUndefined();
    expect(access('GET', '/api/v1/analytics/queue-parked-replicas')).toMatchObject({ feature: 'analytics', access: ['read-only', 'read-write', 'admin'] });
  });

  it('every forwarded route the table marks as answered by 0.15.1 is one of the broker routes above', () => {
    const names = new Set(
      BROKER_0_15_1.map(([, , d]) => d)
        .filter((d) => d.startsWith('tenant:'))
        .map((d) => d.slice('tenant:'.length)),
    );
    const claimed = ROUTES.filter((r) => r.exposure === 'tenant' && r.broker === '0.15.1').map((r) => r.name);
    expect(claimed.filter((n) => !names.has(n))).toEqual([]);
  });
});
