/**
 * Which source won for a tenant: the config file or an admin API override. A status override
 * survives a reload of a file that changed that status; the API, the CLI and the log say so, and
 * `tenants reset` (DELETE /admin/v1/tenants/:id/overrides) gives the file back its say. Without
 * Redis, memoryOverrides makes the same writes work in this process (the demo's console).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { ADMIN_TOKEN, admin, runCli } from './admin-call.js';

const prefix = uniquePrefix();
let broker: BrokerDouble;
let h: EdgeHarness;
let base: RawConfig;
const captured = capturingLogger('info');

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  base = testConfig([broker.url], { redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 200 }, server: { admin: { token: ADMIN_TOKEN } } });
  h = await startEdge(base, { log: captured.log });
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
  const r = await connectTest(SHARED_REDIS_URL);
  await flushPrefix(r, prefix);
  r.disconnect();
});

const pushStatus = async (edge: EdgeHarness) =>
  (await call(edge, 'POST', '/api/v1/push', { token: await token({ roles: ['read-write'], tenant: 'acme' }), body: { items: [{ queue: 'q', payload: 1 }] } }))
    .status;

describe('tenant sources and reset to the file', () => {
  it('a resume override beats a file that says suspended; API, CLI and log show it; reset gives the file its say', async () => {
    expect((await admin(h, 'GET', '/admin/v1/tenants/acme')).json.source).toEqual({ record: 'file', status: 'file', inFile: true, overridden: false });
    expect((await runCli(h, 'tenants', 'resume', 'acme')).code).toBe(0);

    await h.app.reload({ ...base, tenants: { acme: { ...base.tenants.acme!, status: 'suspended' } } });
    expect(await pushStatus(h)).toBe(201);
    const detail = (await admin(h, 'GET', '/admin/v1/tenants/acme')).json;
    expect(detail).toMatchObject({ status: 'active', source: { record: 'file', status: 'admin', inFile: true, overridden: true } });
    expect(captured.lines.find((l) => String(l.msg).startsWith('configuration reload: admin API overrides stay'))).toMatchObject({ tenants: ['acme'] });

    const list = await runCli(h, 'tenants', 'list');
    expect(list.out).toMatch(/^acme\s+active\s+.*\s+file \+ override$/m);
    const get = await runCli(h, 'tenants', 'get', 'acme');
    expect(get.out).toMatch(/^status\s+active \(from an admin API override\)$/m);

    const reset = await runCli(h, 'tenants', 'reset', 'acme');
    expect(reset).toMatchObject({ code: 0, out: 'tenant acme reset to the config file (suspended, plan test)\n' });
    expect(await pushStatus(h)).toBe(403);
    expect((await admin(h, 'GET', '/admin/v1/tenants/acme')).json.source).toEqual({ record: 'file', status: 'file', inFile: true, overridden: false });
    expect(captured.lines.filter((l) => l.msg === 'admin change' && l.action === 'tenant.reset').map((l) => l.target)).toEqual(['acme']);
    await h.app.reload(base);
  });

  it("a file tenant deleted through the API is restored by reset: the file's entry applies again", async () => {
    expect((await admin(h, 'DELETE', '/admin/v1/tenants/acme')).status).toBe(204);
    expect((await admin(h, 'GET', '/admin/v1/tenants/acme')).status).toBe(404);
    expect(await pushStatus(h)).not.toBe(201);

    const reset = await runCli(h, 'tenants', 'reset', 'acme');
    expect(reset).toMatchObject({ code: 0, out: 'tenant acme reset to the config file (active, plan test)\n' });
    expect((await admin(h, 'GET', '/admin/v1/tenants/acme')).json.source).toEqual({ record: 'file', status: 'file', inFile: true, overridden: false });
    expect(await pushStatus(h)).toBe(201);
    // A tenant neither in force nor in the file is still no tenant to reset.
    expect((await admin(h, 'DELETE', '/admin/v1/tenants/nobody/overrides')).status).toBe(404);
  });

  it('reset does not bring a deleted file tenant back over a tenant created since with its host: 409, the new tenant stays', async () => {
    expect((await admin(h, 'DELETE', '/admin/v1/tenants/acme')).status).toBe(204);
    const other = { plan: 'test', brokers: [broker.url], hosts: ['acme.localhost'], tenancyAwareBrokers: true };
    expect((await admin(h, 'PUT', '/admin/v1/tenants/other', { body: other })).status).toBe(200);
    const r = await admin(h, 'DELETE', '/admin/v1/tenants/acme/overrides');
    expect([r.status, r.json.code]).toEqual([409, 'conflict']);
    expect((await admin(h, 'GET', '/admin/v1/tenants/other')).status).toBe(200);
    expect((await admin(h, 'GET', '/admin/v1/tenants/acme')).status).toBe(404);
    // Once the host is free again, the reset applies.
    expect((await admin(h, 'DELETE', '/admin/v1/tenants/other')).status).toBe(204);
    expect((await admin(h, 'DELETE', '/admin/v1/tenants/acme/overrides')).status).toBe(200);
    expect(await pushStatus(h)).toBe(201);
  });

  it('a tenant created through the API has nothing to reset to: 400, it stays', async () => {
    expect(
      (await admin(h, 'PUT', '/admin/v1/tenants/solo', { body: { plan: 'test', brokers: ['http://127.0.0.1:1'], hosts: ['solo.localhost'] } })).status,
    ).toBe(200);
    expect((await admin(h, 'GET', '/admin/v1/tenants/solo')).json.source).toEqual({ record: 'admin', status: 'admin', inFile: false, overridden: false });
    const r = await admin(h, 'DELETE', '/admin/v1/tenants/solo/overrides');
    expect(r.status).toBe(400);
    expect(r.json.error).toContain('not in the configuration file');
    expect((await admin(h, 'GET', '/admin/v1/tenants/solo')).status).toBe(200);
  });
});

describe('without Redis', () => {
  it('memoryOverrides: suspend, resume and reset work in this process; without it the writes are refused', async () => {
    const config = testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } } });
    const memory = await startEdge(config, { memoryOverrides: true });
    const fileOnly = await startEdge(config);
    try {
      expect((await admin(memory, 'GET', '/admin/v1/plans')).json).toMatchObject({ writable: true, backing: 'memory' });
      expect((await admin(memory, 'POST', '/admin/v1/tenants/acme/suspend')).json).toMatchObject({ status: 'suspended', source: { status: 'admin' } });
      expect(await pushStatus(memory)).toBe(403);
      expect((await admin(memory, 'DELETE', '/admin/v1/tenants/acme/overrides')).json).toMatchObject({ status: 'active', source: { status: 'file' } });
      expect(await pushStatus(memory)).toBe(201);

      expect((await admin(fileOnly, 'GET', '/admin/v1/plans')).json).toMatchObject({ writable: false, backing: 'static' });
      expect((await admin(fileOnly, 'POST', '/admin/v1/tenants/acme/suspend')).json.code).toBe('read_only');
    } finally {
      await memory.close();
      await fileOnly.close();
    }
  });
});
