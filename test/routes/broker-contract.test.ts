/**
 * Every route of Queen broker 0.15.1, with the edge's decision for it: forwarded to tenants,
 * operator-only (the admin listener or the broker's own network), or blocked on purpose. The
 * route table must agree, so a broker route can neither be missed nor exposed by accident.
 */
import { describe, expect, it } from 'vitest';
import { compileRoutes } from '../../src/routes/match.js';
import { ROUTES, type Exposure } from '../../src/routes/table.js';

type Decision = Exposure | `tenant:${string}`;

/** The broker's routes as it registers them (`:x` parameters), with the decision. `tenant:<name>` names the edge route. */
const BROKER_0_15_1: ReadonlyArray<readonly [string, string, Decision]> = [
  ['DELETE', '/api/v1/consumer-groups/:group', 'tenant:consumer-groups.delete'],
  ['DELETE', '/api/v1/consumer-groups/:group/queues/:queue', 'tenant:consumer-groups.delete'],
  ['DELETE', '/api/v1/messages/:partitionId/:transactionId', 'tenant:messages.delete'],
  ['DELETE', '/api/v1/resources/queues/:queue', 'tenant:queues.delete'],
  ['GET', '/api/v1/analytics/postgres-stats', 'operator'],
  ['GET', '/api/v1/analytics/queue-lag', 'tenant:analytics.queue-lag'],
  ['GET', '/api/v1/analytics/queue-ops', 'tenant:analytics.queue-ops'],
  ['GET', '/api/v1/analytics/queue-parked-replicas', 'tenant:analytics.queue-parked-replicas'],
  ['GET', '/api/v1/analytics/retention', 'tenant:analytics.retention'],
  ['GET', '/api/v1/analytics/system-metrics', 'operator'],
  ['GET', '/api/v1/analytics/worker-metrics', 'operator'],
  ['GET', '/api/v1/consumer-groups', 'tenant:consumer-groups.read'],
  ['GET', '/api/v1/resources/queues', 'tenant:resources.read'],
  ['GET', '/api/v1/resources/queues/:queue', 'tenant:resources.read'],
  ['GET', '/api/v1/resources/tasks', 'tenant:resources.read'],
  ['GET', '/api/v1/status', 'operator'],
  ['GET', '/api/v1/status/analytics', 'tenant:status.analytics'],
  ['GET', '/api/v1/status/buffers', 'operator'],
  ['GET', '/api/v1/status/queues', 'tenant:status.queues'],
  ['GET', '/api/v1/status/queues/:queue', 'tenant:status.queues'],
  ['GET', '/api/v1/status/queues/:queue/messages', 'tenant:status.queues'],
  ['GET', '/api/v1/system/maintenance', 'operator'],
  ['GET', '/api/v1/system/maintenance/pop', 'operator'],
  ['GET', '/api/v1/system/shared-state', 'operator'],
  ['GET', '/api/v1/traces/:partitionId/:transactionId', 'tenant:traces.read'],
  ['GET', '/api/v1/traces/by-name/:traceName', 'tenant:traces.read'],
  ['GET', '/api/v1/traces/names', 'tenant:traces.read'],
  ['GET', '/health', 'tenant:health'],
  ['GET', '/internal/api/inter-instance/stats', 'blocked'],
  ['GET', '/internal/api/shared-state/stats', 'blocked'],
  ['GET', '/metrics', 'blocked'],
  ['GET', '/metrics/prometheus', 'blocked'],
  ['POST', '/api/v1/ack', 'tenant:ack'],
  ['POST', '/api/v1/ack/batch', 'tenant:ack.batch'],
  ['POST', '/api/v1/configure', 'tenant:configure'],
  ['POST', '/api/v1/consumer-groups/:group/queues/:queue/seek', 'tenant:consumer-groups.seek'],
  ['POST', '/api/v1/consumer-groups/:group/queues/:queue/partitions/:partition/seek', 'tenant:consumer-groups.seek'],
  ['POST', '/api/v1/consumer-groups/:group/subscription', 'tenant:consumer-groups.subscription'],
  ['POST', '/api/v1/lease/:leaseId/extend', 'tenant:lease.extend'],
  ['POST', '/api/v1/migration/reset', 'blocked'],
  ['POST', '/api/v1/migration/start', 'blocked'],
  ['POST', '/api/v1/migration/test-connection', 'blocked'],
  ['POST', '/api/v1/migration/validate', 'blocked'],
  ['POST', '/api/v1/push', 'tenant:push'],
  ['POST', '/api/v1/stats/refresh', 'operator'],
  ['POST', '/api/v1/system/maintenance', 'operator'],
  ['POST', '/api/v1/system/maintenance/pop', 'operator'],
  ['POST', '/api/v1/traces', 'tenant:traces.write'],
  ['POST', '/api/v1/transaction', 'tenant:transaction'],
  ['POST', '/internal/api/notify', 'blocked'],
  ['POST', '/streams/v1/cycle', 'tenant:streams.cycle'],
  ['POST', '/streams/v1/queries', 'tenant:streams.queries'],
  ['POST', '/streams/v1/state/get', 'tenant:streams.state'],
  ['GET', '/api/v1/pop/queue/:queue', 'tenant:pop.queue'],
  ['GET', '/api/v1/pop/queue/:queue/partition/:partition', 'tenant:pop.partition'],
  ['GET', '/api/v1/pop', 'tenant:pop.namespace'],
];

const matcher = compileRoutes(ROUTES);
/** A concrete path for a broker pattern: each `:param` becomes a plausible value. */
const concrete = (pattern: string) => pattern.replace(/:(\w+)/g, (_, name: string) => `${name}-1`);

describe('the route table against broker 0.15.1', () => {
  it.each(BROKER_0_15_1)('%s %s: %s', (method, pattern, decision) => {
    const m = matcher.match(method, concrete(pattern));
    expect(m, 'the edge knows the route').toBeDefined();
    const [exposure, name] = decision.split(':') as [Exposure, string | undefined];
    expect(m!.route.exposure).toBe(exposure);
    if (name !== undefined) {
      expect(m!.route.name).toBe(name);
      expect(m!.route.methods).toContain(method);
      expect(m!.route.broker).toBe('0.15.1');
    }
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
    const names = new Set(BROKER_0_15_1.map(([, , d]) => d).filter((d) => d.startsWith('tenant:')).map((d) => d.slice('tenant:'.length)));
    const claimed = ROUTES.filter((r) => r.exposure === 'tenant' && r.broker === '0.15.1').map((r) => r.name);
    expect(claimed.filter((n) => !names.has(n))).toEqual([]);
  });
});
