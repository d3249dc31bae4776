/** The admin CLI commands against a running proxy, with captured streams. */
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAdminCli } from '../../src/admin/cli-commands.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, runCli } from './admin-call.js';

const prefix = uniquePrefix();
let broker: BrokerDouble;
let h: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  h = await startEdge(
    testConfig([broker.url], { redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 200 }, server: { admin: { token: ADMIN_TOKEN } } }),
  );
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
  const r = await connectTest(SHARED_REDIS_URL);
  await flushPrefix(r, prefix);
  r.disconnect();
});

const cli = (...argv: string[]) => runCli(h, ...argv);

let collected = '';
/** A stderr whose text accumulates in `collected`. */
function collect(): PassThrough {
  collected = '';
  const s = new PassThrough();
  s.on('data', (c: Buffer) => (collected += c.toString()));
  return s;
}

describe('queen-edge tenants / usage', () => {
  it('tenants list as a table and as JSON; get shows the record', async () => {
    const table = await cli('tenants', 'list');
    expect(table.code).toBe(0);
    expect(table.out.split('\n')[0]).toMatch(/^ID\s+STATUS\s+PLAN\s+HOSTS\s+BROKERS\s+SOURCE$/);
    expect(table.out).toMatch(/^acme\s+active\s+test\s+acme\.localhost\s+1\s+file$/m);
    const json = await cli('tenants', 'list', '--json');
    expect(JSON.parse(json.out).tenants[0]).toMatchObject({ id: 'acme' });
    const get = await cli('tenants', 'get', 'acme');
    expect(get.out).toMatch(/^cors origins\s+https:\/\/app\.example\.com, https:\/\/\*\.acme\.dev$/m);
  });

  it('tenants put --file, suspend, resume', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cli-'));
    const file = join(dir, 'gamma.json');
    // gamma's own broker (never called here): acme's would be a shared broker, which needs tenancyAwareBrokers on both.
    await writeFile(file, JSON.stringify({ plan: 'test', brokers: ['http://127.0.0.1:1'], hosts: ['gamma.localhost'] }));
    const put = await cli('tenants', 'put', 'gamma', '--file', file);
    expect(put).toMatchObject({ code: 0, out: 'tenant gamma saved (active, plan test)\n' });
    expect((await cli('tenants', 'suspend', 'gamma')).out).toBe('tenant gamma suspended\n');
    expect((await cli('tenants', 'resume', 'gamma', '--json')).out).toContain('"status": "active"');
    await writeFile(file, JSON.stringify({ plan: 'test', brokers: 'nope' }));
    const bad = await cli('tenants', 'put', 'gamma', '--file', file);
    expect(bad.code).toBe(1);
    expect(bad.err).toContain('brokers');
  });

  it('tenants delete: the tenant is gone from the directory and its traffic refused; deleting it again is a 404, exit 1', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cli-'));
    const file = join(dir, 'delta.json');
    await writeFile(file, JSON.stringify({ plan: 'test', brokers: ['http://127.0.0.1:2'], hosts: ['delta.localhost'] }));
    const put = await cli('tenants', 'put', 'delta', '--file', file);
    expect(put.code, put.err).toBe(0);
    const deltaToken = await token({ roles: ['read-write'], tenant: 'delta' });
    const deltaCode = async () => ((await call(h, 'GET', '/api/v1/pop/queue/q', { token: deltaToken, host: 'delta.localhost' })).json as { code: string }).code;
    // Its broker never answers: a tenant the edge knows, refused only at the broker choice.
    expect(await deltaCode()).toBe('no_upstream');
    expect(await cli('tenants', 'delete', 'delta')).toMatchObject({ code: 0, out: 'tenant delta deleted\n' });
    await waitFor(async () => (await deltaCode()) !== 'no_upstream', 5000, 'delta refused');
    const refusedNow = await call(h, 'GET', '/api/v1/pop/queue/q', { token: deltaToken, host: 'delta.localhost' });
    expect([refusedNow.status, (refusedNow.json as { code: string }).code]).toEqual([403, 'forbidden']);
    expect(JSON.parse((await cli('tenants', 'list', '--json')).out).tenants.map((t: { id: string }) => t.id)).not.toContain('delta');
    const gone = await cli('tenants', 'delete', 'delta');
    expect(gone.code).toBe(1);
    expect(gone.err).toContain('404 not_found');
  });

  it('plans, brokers and stats: tables of what the admin API answers, and its JSON', async () => {
    const plans = await cli('plans');
    expect(plans.code).toBe(0);
    expect(plans.out.split('\n')[0]).toMatch(/^ID\s+REQ\/S\s+BURST\s+MSG\/S\s+MSG_BURST\s+PARKED\s+MAX_PAYLOAD_B\s+MSG\/MONTH\s+FEATURES\s+TENANTS$/);
    expect(plans.out).toMatch(/^test\s+100000\s+100000\s+1000000\s+1000000\s+1000\s+1048576\s+unlimited\s+-\s+\d+$/m);
    expect(JSON.parse((await cli('plans', '--json')).out).plans[0]).toMatchObject({ id: 'test' });

    await waitFor(async () => (await cli('brokers')).out.includes(' up '), 5000, 'the broker healthy');
    const brokers = await cli('brokers');
    expect(brokers.out.split('\n')[0]).toMatch(/^TENANT\s+BROKER\s+HEALTH\s+IN_FLIGHT\s+PICKS\s+SHARE\s+LAST_CHANGE$/);
    expect(brokers.out).toMatch(new RegExp(`^acme\\s+${broker.url.replace(/[.]/g, '\\.')}\\s+up\\s+0\\s+\\d+\\s+100\\.0%\\s+-$`, 'm'));

    // A request of no tenant: acme's metered usage stays what the usage test counts.
    expect((await call(h, 'GET', '/cli-stats', { host: 'nobody.localhost' })).status).toBe(404);
    const stats = await cli('stats');
    expect(stats.code).toBe(0);
    expect(stats.out).toMatch(/^workers\s+1$/m);
    expect(stats.out).toMatch(/^requests\s+[1-9]\d*( \(\d+\.\d\/s\))?$/m);
    expect(stats.out).toMatch(/^refusals\s+.*route_not_found=[1-9]/m);
    expect(stats.out).toMatch(/^redis\s+limiter redis, failMode local, 0 errors$/m);
    expect(JSON.parse((await cli('stats', '--json')).out)).toMatchObject({ workers: 1, redis: { configured: true } });
  });

  it('reloads: none yet, then an applied one, then a refused one with its problems (exit 1)', async () => {
    expect(await cli('reloads')).toMatchObject({ code: 0, out: 'no reload since the start (applied 0, refused 0)\n' });
    await h.app.reload({ ...h.config, server: { ...h.config.server, drainTimeoutMs: h.config.server.drainTimeoutMs + 1 } });
    const applied = await cli('reloads');
    expect(applied.code).toBe(0);
    expect(applied.out).toMatch(
      /^last reload \S+: applied\nchanged, applied only after a restart:\n {2}server\.drainTimeoutMs\nsince the start: applied 1, refused 0\n$/,
    );
    const acme = h.config.tenants.acme!;
    await expect(h.app.reload({ ...h.config, tenants: { ...h.config.tenants, acme: { ...acme, plan: 'nope' } } })).rejects.toThrow();
    const refused = await cli('reloads');
    expect(refused.code).toBe(1);
    expect(refused.out).toMatch(/^last reload \S+: refused\n {2}tenants\.acme\.plan: .*nope/);
    expect(refused.err).toContain('the last reload was refused');
    expect(JSON.parse((await cli('reloads', '--json')).out)).toMatchObject({ applied: 1, refused: 1, last: { result: 'refused' } });
  });

  it('usage TENANT --month: a day table with a total row, and JSON', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    await call(h, 'POST', '/api/v1/push', {
      token: tok,
      body: {
        items: [
          { queue: 'q', payload: 1 },
          { queue: 'q', payload: 2 },
        ],
      },
    });
    const month = new Date().toISOString().slice(0, 7);
    // The push is metered after its answer went out.
    const usage = async () => JSON.parse((await cli('usage', 'acme', '--month', month, '--json')).out);
    await waitFor(async () => (await usage()).total?.requests === 1, 5000, "the push in acme's usage");
    const table = await cli('usage', 'acme', '--month', month);
    expect(table.code).toBe(0);
    expect(table.out.split('\n')[0]).toMatch(/^DAY\s+REQUESTS\s+PUSHED\s+DELIVERED\s+ACKS\s+INGRESS_B\s+EGRESS_B\s+REFUSALS$/);
    expect(table.out).toMatch(/^total\s+1\s+2\s+0\s+0\s+\d+\s+\d+\s+-$/m);
    const json = await usage();
    expect(json).toMatchObject({ tenant: 'acme', granularity: 'day', total: { requests: 1, messagesPushed: 2 } });
    expect(json.from).toBe(`${month}-01T00:00:00.000Z`);
  });

  it('exit 1 when refused or unreachable, 2 for a wrong command line', async () => {
    const refused = await cli('tenants', 'list', '--token', 'wrong');
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('401 unauthorized');
    expect((await cli('tenants', 'get', 'nope')).code).toBe(1);
    expect((await cli('tenants', 'list', '--url', 'http://127.0.0.1:1')).code).toBe(1);
  });

  it('a 401 says which token the admin API expects and where the CLI took the one it sent', async () => {
    const wrong = await cli('plans', '--token', 'wrong');
    expect(wrong.code).toBe(1);
    expect(wrong.err).toContain(`the token from --token is not the one the admin API at ${h.adminUrl} expects its server.admin.token`);
    const none = await runAdminCli(['stats'], { stdout: new PassThrough(), stderr: collect(), env: { QUEEN_EDGE_ADMIN_URL: h.adminUrl } });
    expect(none).toBe(1);
    expect(collected).toContain('no token was sent');
    expect(collected).toContain('pass it with --token TOKEN or set QUEEN_EDGE_ADMIN_TOKEN');
  });

  it('a refused connection asks whether the edge runs and names the admin port and how to point the CLI at it', async () => {
    const port = await freePort();
    const r = await cli('tenants', 'list', '--url', `http://127.0.0.1:${port}`);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`cannot reach the admin API at http://127.0.0.1:${port}: connection refused. Is queen-edge running on this host?`);
    expect(r.err).toContain('server.admin.port (9090 unless the configuration or --admin-port says otherwise)');
    expect(r.err).toContain('--url URL or QUEEN_EDGE_ADMIN_URL');
  });

  it('exit 2 for a wrong command line', async () => {
    for (const argv of [
      ['tenants', 'get'],
      ['tenants', 'get', 'a', 'b'],
      ['usage', 'acme', '--month', '2026-13'],
      ['tenants', 'list', '--colour'],
      ['tenants', 'list', '--file', 'x'],
      ['frobnicate'],
      [],
    ]) {
      const r = await cli(...argv);
      expect(r.code, argv.join(' ')).toBe(2);
      expect(r.err).toContain('usage:');
    }
  });

  it('a group alone or --help prints its commands on stdout, exit 0', async () => {
    for (const argv of [['tenants'], ['tenants', '--help'], ['tenants', 'put', '--help'], ['usage', '--help'], ['usage', '-h']]) {
      const r = await cli(...argv);
      expect(r, argv.join(' ')).toMatchObject({ code: 0, err: '' });
      expect(r.out).toMatch(new RegExp(`^usage:\\n  queen-edge ${argv[0]} `));
    }
    expect((await cli('tenants')).out).toContain('queen-edge tenants put ID --file FILE.json');
    expect((await cli('usage', '--help')).out).not.toContain('tenants');
  });

  it('against a proxy without an admin token: says the admin API is off and how to turn it on', async () => {
    const off = await startEdge(testConfig([broker.url], { server: { admin: { token: null } } }));
    try {
      const stdout = new PassThrough();
      const stderr = new PassThrough();
      let err = '';
      stderr.on('data', (c: Buffer) => (err += c.toString()));
      const code = await runAdminCli(['tenants', 'list'], { stdout, stderr, env: { QUEEN_EDGE_ADMIN_URL: off.adminUrl } });
      expect(code).toBe(1);
      expect(err).toContain(`the admin API at ${off.adminUrl} is off: set server.admin.token`);
    } finally {
      await off.close();
    }
  });

  // Last: it deletes and restores acme, the file's tenant the other tests use.
  it('a file tenant deleted through the API: reset ends the deletion and hands it back to the file', async () => {
    expect((await cli('tenants', 'delete', 'acme')).code).toBe(0);
    expect((await cli('tenants', 'reset', 'acme')).code).toBe(0);
    expect((await cli('tenants', 'list')).out).toMatch(/^acme\s+active\s+test\s+acme\.localhost\s+1\s+file$/m);
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    expect([200, 204]).toContain((await call(h, 'GET', '/api/v1/pop/queue/q', { token: tok })).status);
  });
});
