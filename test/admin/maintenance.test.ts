/**
 * Broker maintenance through the admin API, against two broker doubles: read and switch the
 * maintenance and pop-maintenance modes per broker or for all of a tenant's brokers, each switch
 * logged with the admin token's id; and a pop in pop maintenance (the broker's 204 with a body)
 * reaches the client as a clean empty pop.
 */
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../../src/admin/cli-commands.js';
import { decodeJwt } from 'jose';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { ADMIN_TOKEN, admin } from './admin-call.js';

let b1: BrokerDouble;
let b2: BrokerDouble;
let edge: EdgeHarness;
const captured = capturingLogger('info');
const MINT_SECRET = 'mint-secret-for-maintenance-tests-0123';

beforeAll(async () => {
  [b1, b2] = await Promise.all([startBrokerDouble({ name: 'b1' }), startBrokerDouble({ name: 'b2' })]);
  edge = await startEdge(
    testConfig([b1.url, b2.url], {
      server: { admin: { token: ADMIN_TOKEN } },
      upstreamIdentity: { mode: 'mint', mint: { secret: MINT_SECRET } },
    }),
    { log: captured.log },
  );
});

afterAll(async () => {
  await edge?.close();
  await Promise.all([b1?.close(), b2?.close()]);
});

const systemCalls = (b: BrokerDouble) => b.requests.filter((r) => r.path.startsWith('/api/v1/system/'));

describe('broker maintenance over the admin API', () => {
  it('reads both brokers, switches one or all, and logs each switch with the admin token id', async () => {
    const off = { maintenance: false, popMaintenance: false };
    expect((await admin(edge, 'GET', '/admin/v1/tenants/acme/maintenance')).json).toEqual({
      tenant: 'acme',
      brokers: [
        { url: b1.url, ...off },
        { url: b2.url, ...off },
      ],
    });

    const one = await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'pop', enabled: true, broker: b1.url } });
    expect(one.status).toBe(200);
    expect(one.json.brokers).toEqual([{ url: b1.url, maintenance: false, popMaintenance: true }]);
    expect([b1.maintenance, b2.maintenance]).toEqual([
      { push: false, pop: true },
      { push: false, pop: false },
    ]);

    const all = await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'push', enabled: true } });
    expect(all.json.brokers).toEqual([
      { url: b1.url, maintenance: true, popMaintenance: true },
      { url: b2.url, maintenance: true, popMaintenance: false },
    ]);
    expect((await admin(edge, 'GET', `/admin/v1/tenants/acme/maintenance?broker=${encodeURIComponent(b2.url)}`)).json.brokers).toEqual([
      { url: b2.url, maintenance: true, popMaintenance: false },
    ]);

    const changes = captured.lines.filter((l) => l.msg === 'admin change' && l.action === 'broker.maintenance');
    expect(changes.map((l) => l.change)).toEqual([
      { mode: 'pop', enabled: true, brokers: [b1.url] },
      { mode: 'push', enabled: true, brokers: [b1.url, b2.url] },
    ]);
    expect(changes.every((l) => typeof l.admin === 'string' && /^[0-9a-f]{8}$/.test(l.admin))).toBe(true);

    // The broker's system routes want an admin: in mint mode the edge signs one for the call.
    const auth = systemCalls(b1).map((r) => decodeJwt(String(r.headers.authorization).slice(7)));
    expect(auth.length).toBeGreaterThan(0);
    for (const claims of auth) expect(claims).toMatchObject({ roles: ['admin'], tenant: 'acme' });

    await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'push', enabled: false } });
    await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'pop', enabled: false } });
    expect([b1.maintenance, b2.maintenance]).toEqual([
      { push: false, pop: false },
      { push: false, pop: false },
    ]);
  });

  it('refuses a broker the tenant does not list, a bad body and an unknown tenant; 502 names a broker that is down', async () => {
    const before = systemCalls(b1).length + systemCalls(b2).length;
    expect(
      (await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'pop', enabled: true, broker: 'http://127.0.0.1:1' } })).status,
    ).toBe(400);
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'both', enabled: true } })).json.code).toBe('invalid_request');
    expect((await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { enabled: 'yes' } })).status).toBe(400);
    expect((await admin(edge, 'GET', '/admin/v1/tenants/nope/maintenance')).status).toBe(404);
    expect((await admin(edge, 'GET', '/admin/v1/tenants/acme/maintenance', { token: null })).status).toBe(401);
    expect(systemCalls(b1).length + systemCalls(b2).length).toBe(before);

    await b2.close();
    try {
      const r = await admin(edge, 'GET', '/admin/v1/tenants/acme/maintenance');
      expect(r.status).toBe(502);
      expect(r.json.code).toBe('bad_gateway');
      expect(r.json.brokers[0]).toEqual({ url: b1.url, maintenance: false, popMaintenance: false });
      expect(r.json.brokers[1]).toEqual({ url: b2.url, error: expect.any(String) });
    } finally {
      await b2.restart();
    }
  });

  it('a pop in pop maintenance (a 204 with a body) reaches the client as a bodiless 204, and the next pop is served', async () => {
    const rw = await token({ roles: ['read-write'], tenant: 'acme' });
    // One message on each broker, so the pop finds it whichever broker its lane falls on.
    for (const b of [b1, b2]) {
      const r = await request(`${b.url}/api/v1/push`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ items: [{ queue: 'maint', payload: { n: 1 } }] }),
      });
      expect(r.statusCode).toBe(201);
      await r.body.dump();
    }
    await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'pop', enabled: true } });
    try {
      for (let i = 0; i < 3; i++) {
        const empty = await call(edge, 'GET', '/api/v1/pop/queue/maint', { token: rw });
        expect(empty.status).toBe(204);
        expect(empty.text).toBe('');
      }
    } finally {
      await admin(edge, 'PUT', '/admin/v1/tenants/acme/maintenance', { body: { mode: 'pop', enabled: false } });
    }
    const pop = await call(edge, 'GET', '/api/v1/pop/queue/maint', { token: rw });
    expect(pop.status).toBe(200);
    expect((pop.json as { messages: unknown[] }).messages).toHaveLength(1);
    expect(forwarded(b1).length + forwarded(b2).length).toBeGreaterThanOrEqual(4);
  });

  it('the CLI reads and switches maintenance (exit 0), and refuses a wrong switch word (exit 2)', async () => {
    const cli = async (...argv: string[]) => {
      const stdout = new PassThrough();
      let out = '';
      stdout.on('data', (c: Buffer) => (out += c.toString()));
      const code = await runAdminCli(argv, {
        stdout,
        stderr: new PassThrough(),
        env: { QUEEN_EDGE_ADMIN_URL: edge.adminUrl, QUEEN_EDGE_ADMIN_TOKEN: ADMIN_TOKEN },
      });
      return { code, out };
    };
    const on = await cli('maintenance', 'acme', 'on', '--pop', '--broker', b2.url);
    expect(on.code).toBe(0);
    expect(on.out).toMatch(new RegExp(`^${b2.url.replace(/[.]/g, '\\.')}\\s+off\\s+on$`, 'm'));
    expect(b2.maintenance).toEqual({ push: false, pop: true });
    const read = await cli('maintenance', 'acme', '--json');
    expect(JSON.parse(read.out).brokers).toEqual([
      { url: b1.url, maintenance: false, popMaintenance: false },
      { url: b2.url, maintenance: false, popMaintenance: true },
    ]);
    expect((await cli('maintenance', 'acme', 'off', '--pop')).code).toBe(0);
    expect(b2.maintenance.pop).toBe(false);
    expect((await cli('maintenance', 'acme', 'maybe')).code).toBe(2);
  });
});
