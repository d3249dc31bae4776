/** config/reload-plan.ts: which changed settings a reload applies and which need a restart, by path. */
import { describe, expect, it } from 'vitest';
import { changedPaths, credentialsOnly, planReload, runningConfig } from '../../src/config/reload-plan.js';
import { testConfig } from '../helpers/edge.js';

const started = testConfig(['http://127.0.0.1:1']);

describe('planReload', () => {
  it('names leaf settings by path; id-keyed maps and arrays are compared whole', () => {
    const next = testConfig(['http://127.0.0.1:2'], {
      server: { https: { port: 8443 }, trustedProxies: ['10.0.0.0/8'] },
      routes: { 'POST /api/v1/ack': ['admin'] },
    });
    // Tenants are left to the directory's sliced comparison.
    expect(changedPaths(started, next)).toEqual(['server.https.port', 'server.trustedProxies', 'routes']);
  });

  it('applies tenants, routes, the admin token, certificate paths and the verifier settings; the rest needs a restart', () => {
    const next = testConfig(['http://127.0.0.1:1'], {
      server: { admin: { token: 'new-token-0123456789abcdef' }, https: { port: 8443, cert: 'c.pem', key: 'k.pem' }, drainTimeoutMs: 5 },
      auth: { secret: 'another-secret-0123456789abcdef', failedAuth: { attempts: 3 } },
      redis: { url: 'redis://:pw@127.0.0.1:6379' },
      queryAllow: { 'resources.read': ['debug'] },
    });
    expect(planReload(started, started, next)).toEqual({
      applied: ['server.https.cert', 'server.https.key', 'server.admin.token', 'auth.secret'],
      restartNeeded: ['server.https.port', 'server.drainTimeoutMs', 'redis.url', 'auth.failedAuth.attempts', 'queryAllow'],
    });
  });

  it("names tracing settings as needing a restart; a plan's trace ratio comes with the plans", () => {
    const next = testConfig(['http://127.0.0.1:1'], {
      tracing: { enabled: true, ratio: 0.1 },
      plans: { test: { ...started.plans.test, traceRatio: 0.5 } },
    });
    expect(planReload(started, started, next)).toEqual({ applied: ['plans'], restartNeeded: ['tracing.enabled', 'tracing.ratio'] });
  });

  it('keeps naming a setting that needs a restart at later reloads, and applies only what changed since the last one', () => {
    const first = testConfig(['http://127.0.0.1:1'], { server: { https: { port: 8443 } }, auth: { secret: 'another-secret-0123456789abcdef' } });
    const second = testConfig(['http://127.0.0.1:1'], { server: { https: { port: 8443 } }, auth: { secret: 'another-secret-0123456789abcdef' }, routes: {} });
    expect(planReload(started, first, second)).toEqual({ applied: [], restartNeeded: ['server.https.port'] });
    // Back to the started value: nothing waits for a restart any more.
    expect(planReload(started, second, started).restartNeeded).toEqual([]);
  });

  it('runningConfig: what a worker forked after the reload runs, the reloadable settings new and the others as started', () => {
    const next = testConfig(['http://127.0.0.1:2'], {
      server: { admin: { token: 'new-token-0123456789abcdef' }, https: { port: 8443 } },
      upstream: { connections: 7 },
    });
    const running = runningConfig(started, next);
    expect(running.server.admin.token).toBe('new-token-0123456789abcdef');
    expect(running.tenants.acme!.brokers).toEqual(['http://127.0.0.1:2']);
    expect(running.server.https.port).toBe(started.server.https.port);
    expect(running.upstream.connections).toBe(started.upstream.connections);
    expect(planReload(started, running, next)).toEqual({ applied: [], restartNeeded: ['server.https.port', 'upstream.connections'] });
  });

  it('a Redis URL with only new credentials is applied (a rotation); another server or database needs a restart', () => {
    expect(credentialsOnly('redis://u:old@10.0.0.1:6379/0', 'redis://u:new@10.0.0.1:6379/0')).toBe(true);
    expect(credentialsOnly('redis://:old@10.0.0.1:6379', 'redis://other:new@10.0.0.1:6379')).toBe(true);
    expect(credentialsOnly('redis://u:old@10.0.0.1:6379', 'redis://u:old@10.0.0.2:6379')).toBe(false);
    expect(credentialsOnly('redis://u:old@10.0.0.1:6379/0', 'redis://u:new@10.0.0.1:6379/1')).toBe(false);
    expect(credentialsOnly(null, 'redis://10.0.0.1:6379')).toBe(false);
    const at = (url: string) => testConfig(['http://127.0.0.1:1'], { redis: { url } });
    expect(planReload(at('redis://u:a@r:6379'), at('redis://u:a@r:6379'), at('redis://u:b@r:6379'))).toEqual({ applied: ['redis.url'], restartNeeded: [] });
    expect(planReload(at('redis://u:a@r:6379'), at('redis://u:a@r:6379'), at('redis://u:a@s:6379'))).toEqual({ applied: [], restartNeeded: ['redis.url'] });
  });
});
