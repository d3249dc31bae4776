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
});
