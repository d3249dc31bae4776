/**
 * DNS rebinding on the admin listener: a browser led to it under an attacker's domain sends that
 * domain as Host and is refused before any endpoint answers, tokenless ones included. IP literals
 * (probes, scrapers), localhost and the configured names are served.
 */
import { connect } from 'node:net';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHostAllowed, adminHostNames } from '../../src/admin/hosts.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { readReply, startEdge, testConfig, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN } from './admin-call.js';

const REFUSED = { error: 'Host not allowed on the admin listener (server.admin.allowedHosts)', code: 'forbidden' };

describe('adminHostAllowed', () => {
  const names = adminHostNames('127.0.0.1', ['Queen-Edge-Admin.ns.svc']);

  it.each([
    ['127.0.0.1'],
    ['10.20.30.40:9090'],
    ['[::1]'],
    ['[::1]:9090'],
    ['[::ffff:10.0.0.1]:9090'],
    ['localhost'],
    ['LocalHost:9090'],
    ['localhost:'],
    ['queen-edge-admin.ns.svc'],
    ['QUEEN-EDGE-ADMIN.NS.SVC:9090'],
    ['queen-edge-admin.ns.svc.:9090'],
  ])('accepts %j', (host) => {
    expect(adminHostAllowed(host, names)).toBe(true);
  });

  it.each([
    [undefined],
    [''],
    ['attacker.example'],
    ['127.0.0.1.attacker.example'],
    ['localhost.attacker.example'],
    ['queen-edge-admin.ns.svc.attacker.example:9090'],
    ['queen-edge-admin.other.svc'],
    ['[attacker.example]'],
    ['::1'],
    ['localhost:9090:1'],
    ['localhost:http'],
    ['local host'],
    ['127.0.0.1:9090@attacker.example'],
  ])('refuses %j', (host) => {
    expect(adminHostAllowed(host, names)).toBe(false);
  });

  it("accepts the name of the listener's own bind address", () => {
    expect(adminHostAllowed('admin.internal:9090', adminHostNames('Admin.Internal', []))).toBe(true);
    expect(adminHostAllowed('admin.internal:9090', adminHostNames('0.0.0.0', []))).toBe(false);
  });
});

describe('the admin listener over a socket', () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  let port: number;

  const get = async (path: string, host: string): Promise<Reply> =>
    readReply(await request(`${edge.adminUrl}${path}`, { headers: { host, authorization: `Bearer ${ADMIN_TOKEN}` } }));

  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    edge = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN, allowedHosts: ['Queen-Edge-Admin.ns.svc'] } } }));
    port = Number(new URL(edge.adminUrl).port);
    await waitFor(async () => (await get('/readyz', '127.0.0.1')).status === 200, 10_000, 'the edge to be ready');
  });

  afterAll(async () => {
    await edge?.close();
    await broker?.close();
  });

  const PATHS = ['/metrics', '/readyz', '/livez', '/console', '/console/app.js', '/admin/v1/tenants'];

  it('refuses a rebound Host on every endpoint, tokenless or not, before it answers', async () => {
    for (const host of ['attacker.example', `attacker.example:${port}`, `localhost.attacker.example:${port}`, 'queen-edge-admin.other.svc']) {
      for (const path of PATHS) {
        const r = await get(path, host);
        expect([r.status, r.json], `${host} ${path}`).toEqual([403, REFUSED]);
        expect(r.headers['content-type']).toBe('application/json');
      }
    }
  });

  const rawGet = (head: string): Promise<string> =>
    new Promise<string>((resolve, reject) => {
      const socket = connect(port, '127.0.0.1', () => socket.write(head));
      let text = '';
      socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
      socket.on('end', () => resolve(text));
      socket.on('error', reject);
    });

  it('refuses a request without Host (HTTP/1.0; Node itself answers 400 to an HTTP/1.1 one)', async () => {
    const raw = await rawGet('GET /metrics HTTP/1.0\r\n\r\n');
    expect(raw.split('\r\n', 1)[0]).toBe('HTTP/1.1 403 Forbidden');
    expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))).toEqual(REFUSED);
  });

  it('refuses two Host headers, whichever comes first (Node would read only the first)', async () => {
    for (const hosts of [
      ['127.0.0.1', 'attacker.example'],
      ['attacker.example', 'localhost'],
    ]) {
      const raw = await rawGet(`GET /metrics HTTP/1.1\r\nHost: ${hosts[0]}\r\nHost: ${hosts[1]}\r\nConnection: close\r\n\r\n`);
      expect(raw.split('\r\n', 1)[0], hosts.join(' then ')).toBe('HTTP/1.1 403 Forbidden');
      expect(JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4))).toEqual(REFUSED);
    }
  });

  it('serves IP literals, localhost and the configured names, any port, any case', async () => {
    for (const host of [
      `127.0.0.1:${port}`,
      '10.20.30.40:9090',
      `[::1]:${port}`,
      'localhost',
      `LOCALHOST:${port}`,
      'queen-edge-admin.ns.svc',
      `Queen-Edge-Admin.NS.svc:${port}`,
    ]) {
      const metrics = await get('/metrics', host);
      expect([metrics.status, metrics.text], host).toEqual([200, expect.stringContaining('# HELP queen_edge_')]);
      expect([(await get('/readyz', host)).json, (await get('/livez', host)).json], host).toEqual([{ status: 'ready' }, { status: 'ok' }]);
      expect((await get('/console', host)).text, host).toContain('<title>queen-edge console</title>');
      expect((await get('/admin/v1/tenants', host)).json, host).toMatchObject({ tenants: [{ id: 'acme' }] });
    }
  });
});
