import { describe, expect, it } from 'vitest';
import { readFile } from 'node:fs/promises';
import { isEdgeError } from '../../src/errors.js';
import { compileRoutes, normalizeTarget } from '../../src/routes/match.js';
import { renderReference } from '../../src/routes/reference.js';
import { applyRouteOverrides, ROUTES } from '../../src/routes/table.js';

const matcher = compileRoutes(ROUTES);

function routeOf(method: string, target: string): string | null {
  const t = normalizeTarget(target);
  if (isEdgeError(t)) return `error:${t.code}`;
  const m = matcher.match(method, t.path);
  return m ? `${m.route.exposure}:${m.route.name}` : null;
}

describe('normalizeTarget', () => {
  it.each([
    ['/api/v1/push', '/api/v1/push', ''],
    ['/api/v1/pop/queue/q?wait=true', '/api/v1/pop/queue/q', 'wait=true'],
    ['//api//v1/push', '/api/v1/push', ''],
    ['/api/v1/push/', '/api/v1/push', ''],
    ['/api/v1/push/../system/maintenance', '/api/v1/system/maintenance', ''],
    ['/api/v1/%2e%2e/v1/push', '/api/v1/push', ''],
    ['/../../etc/passwd', '/etc/passwd', ''],
    ['/api/v1/pop/queue/a%2Fb', '/api/v1/pop/queue/a%2Fb', ''],
    ['/api/v1/pop/queue/%6Frders', '/api/v1/pop/queue/orders', ''],
    ['/api/v1/pop/queue/caf%C3%A9', '/api/v1/pop/queue/caf%C3%A9', ''],
    ['/./api/./v1/push', '/api/v1/push', ''],
    // Query bytes outside RFC 3986 query characters are escaped; valid ones, `?` and `%XX` kept.
    ['/api/v1/pop?wait=true&x=#&timeout=20', '/api/v1/pop', 'wait=true&x=%23&timeout=20'],
    ['/api/v1/pop?g=a b\\c"\u00e9&h=/?%20', '/api/v1/pop', 'g=a%20b%5Cc%22%E9&h=/?%20'],
  ])('%s -> %s', (input, path, query) => {
    expect(normalizeTarget(input)).toEqual({ path, query });
  });

  it.each(['/api/v1/pop/queue/%E0%A4%A', '*', 'http://evil/api', `/${'a'.repeat(5000)}`])('refuses %s', (input) => {
    const t = normalizeTarget(input);
    expect(isEdgeError(t) && t.code).toBe('invalid_request');
  });
});

describe('route table', () => {
  it.each([
    ['POST', '/api/v1/push', 'tenant:push'],
    ['GET', '/api/v1/pop/queue/orders', 'tenant:pop.queue'],
    ['GET', '/api/v1/pop/queue/orders/partition/acct-42', 'tenant:pop.partition'],
    ['GET', '/api/v1/pop?namespace=x', 'tenant:pop.namespace'],
    ['POST', '/api/v1/ack/batch', 'tenant:ack.batch'],
    ['POST', '/api/v1/lease/abc/extend', 'tenant:lease.extend'],
    ['GET', '/api/v1/resources', 'tenant:resources.read'],
    ['GET', '/api/v1/resources/queues/orders', 'tenant:resources.read'],
    ['DELETE', '/api/v1/resources/queues/orders', 'tenant:queues.delete'],
    ['GET', '/api/v1/analytics/queue-lag', 'tenant:analytics.queue-lag'],
    ['GET', '/api/v1/analytics/system-metrics', 'operator:operator.analytics.system-metrics'],
    ['GET', '/api/v1/status', 'operator:operator.status'],
    ['GET', '/api/v1/status/buffers', 'operator:operator.buffers'],
    ['GET', '/api/v1/status/queues/orders', 'tenant:status.queues'],
    ['POST', '/api/v1/system/maintenance', 'operator:operator.system'],
    ['POST', '/api/v1/push/../system/maintenance', 'operator:operator.system'],
    ['GET', '/internal/anything/deep', 'blocked:blocked.internal'],
    ['GET', '/metrics', 'blocked:blocked.metrics'],
    ['GET', '/metrics/prometheus', 'blocked:blocked.metrics-prometheus'],
    ['POST', '/api/v1/migration/run', 'blocked:blocked.migration'],
    ['POST', '/api/v1/timers', 'tenant:timers.create'],
    ['POST', '/api/v1/timers/t1/cancel', 'tenant:timers.write'],
    ['GET', '/health', 'tenant:health'],
    ['GET', '/api/v1/push', null],
    ['PUT', '/api/v1/push', null],
    ['GET', '/nope', null],
    ['GET', '/API/V1/RESOURCES', null],
  ])('%s %s', (method, target, expected) => {
    expect(routeOf(method, target)).toBe(expected);
  });

  it('keeps an encoded slash inside the queue segment', () => {
    const t = normalizeTarget('/api/v1/pop/queue/a%2Fb/partition/p');
    if (isEdgeError(t)) throw new Error('unexpected');
    expect(matcher.match('GET', t.path)?.params).toMatchObject({ queue: 'a/b', partition: 'p' });
  });

  it('admin is not a superset: push refuses admin, read-only reads allow it', () => {
    const push = ROUTES.find((r) => r.name === 'push')!;
    expect(push.access).toEqual(['write-only', 'read-write']);
    const pop = ROUTES.find((r) => r.name === 'pop.queue')!;
    expect(pop.access).toEqual(['read-write']);
  });

  it('applies access overrides and reports unknown ones', () => {
    const { routes, problems } = applyRouteOverrides(ROUTES, { 'POST /api/v1/push': ['write-only'], 'GET /nope': ['admin'], bogus: ['admin'] });
    expect(routes.find((r) => r.name === 'push')!.access).toEqual(['write-only']);
    expect(problems).toHaveLength(2);
  });

  it('docs/reference.md is the rendering of the table (run `npm run routes` after a change)', async () => {
    const onDisk = await readFile(new URL('../../docs/reference.md', import.meta.url), 'utf8');
    expect(onDisk).toBe(renderReference(ROUTES));
  });
});
