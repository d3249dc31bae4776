/** The CLI as a process: usage, dispatch to the admin commands, exit 2 with every config problem. */
import { afterEach, describe, expect, it } from 'vitest';
import { readFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { testConfig } from '../helpers/edge.js';
import { edgeTracker, freePort } from './edge-process.js';

const ROOT = resolve(import.meta.dirname, '../..');

const edges = edgeTracker();
afterEach(() => edges.cleanup());
const start = edges.start;

// Every test starts the CLI under tsx, which takes seconds on a loaded machine.
describe('queen-edge command line', { timeout: 60_000 }, () => {
  it('--help prints the usage and exits 0', async () => {
    const edge = await start({}, ['--help']);
    expect((await edge.exited).code).toBe(0);
    const help = edge.lines.map((l) => l.msg).join('\n');
    expect(help).toMatch(/^usage: queen-edge \[--config PATH\]/);
    expect(help).toContain('queen-edge validate [--config PATH]');
    expect(help).toContain('queen-edge migrate [--config PATH]');
    // A terminal's width.
    expect(help.split('\n').filter((l) => l.length > 80)).toEqual([]);
  });

  it('started as one of several replicas (QUEEN_EDGE_REPLICAS, set by the Helm chart) without Redis: an error line says quotas multiply; one replica: none', async () => {
    const config = testConfig(['http://127.0.0.1:1'], { log: { level: 'info' } });
    const lonely = await start(config, undefined, { QUEEN_EDGE_REPLICAS: '3' });
    const warning = await lonely.waitForLog((l) => typeof l.msg === 'string' && l.msg.startsWith('QUEEN_EDGE_REPLICAS says'), 30_000);
    expect(warning).toMatchObject({ level: 50, replicas: 3 });
    expect(warning.msg).toContain('together they admit 3 times every quota');
    const single = await start(config, undefined, { QUEEN_EDGE_REPLICAS: '1' });
    await single.waitForLog((l) => l.msg === 'queen-edge listening', 30_000);
    expect(single.lines.filter((l) => String(l.msg).startsWith('QUEEN_EDGE_REPLICAS'))).toEqual([]);
  });

  it('unknown arguments: usage on stderr, exit 2', async () => {
    const edge = await start({}, ['--bogus']);
    expect((await edge.exited).code).toBe(2);
    expect(edge.stderr()).toContain("Unknown option '--bogus'");
    expect(edge.stderr()).toContain('usage: queen-edge');
  });

  it('--version prints the package version', async () => {
    const { version } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { version: string };
    const edge = await start({}, ['--version']);
    expect((await edge.exited).code).toBe(0);
    expect(edge.lines.map((l) => l.msg)).toEqual([`queen-edge ${version}`]);
  });

  /** The arguments `npm start -- ...extra` gives the CLI: the script's own after `node dist/cli.js`, then the extra ones. */
  async function npmStartArgs(...extra: string[]): Promise<string[]> {
    const { scripts } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    const words = scripts.start!.split(/\s+/);
    // exec: the shell npm runs the script in becomes the edge, so npm's signals reach it (test/deploy/signals.test.ts).
    expect(words.slice(0, 3)).toEqual(['exec', 'node', 'dist/cli.js']);
    return [...words.slice(3), ...extra];
  }
  // The file's own plaintext listener (config/default.yaml has none) shows which config the process read.
  const onPortZero = {
    ...testConfig(['http://127.0.0.1:1'], { server: { https: { port: 0 }, http: { port: 0 }, admin: { port: 0 } } }),
    log: { level: 'info' },
  };

  it('npm start reads $QUEEN_EDGE_CONFIG', async () => {
    const edge = await start(onPortZero, await npmStartArgs(), { QUEEN_EDGE_CONFIG: '{config}' });
    const listening = await edge.waitForLog((l) => l.msg === 'queen-edge listening', 40_000);
    expect(listening.http).not.toBeNull();
  });

  it('npm start -- --config FILE --port N serves FILE on port N', async () => {
    const port = await freePort();
    const edge = await start(onPortZero, await npmStartArgs('--config', '{config}', '--port', String(port)));
    const listening = (await edge.waitForLog((l) => l.msg === 'queen-edge listening', 40_000)) as { http: unknown; https: { port: number } };
    expect(listening.http).not.toBeNull();
    expect(listening.https.port).toBe(port);
  });

  it('log.format pretty: lines a person reads (time, level, message), not JSON', async () => {
    const edge = await start({ ...onPortZero, log: { level: 'info', format: 'pretty' } });
    const line = await edge.waitForLog((l) => typeof l.msg === 'string' && l.msg.includes('queen-edge listening'), 40_000);
    // Not parsed as JSON by the helper: the whole text is the message.
    expect(Object.keys(line)).toEqual(['msg']);
    expect(line.msg).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: queen-edge listening/);
  });

  it('a secret from the environment never reaches the start-up errors; the variable is named', async () => {
    const secret = '*s3cr3t-value #with @odd chars';
    const edge = await start(
      { ...onPortZero, server: { https: { port: '${EDGE_PORT}' } }, auth: { secret: '${JWT_SECRET}', defaultTenant: '${DEFAULT_TENANT}' } },
      undefined,
      { EDGE_PORT: secret, JWT_SECRET: secret, DEFAULT_TENANT: secret },
    );
    expect((await edge.exited).code).toBe(2);
    const err = edge.stderr();
    expect(err).toContain('server.https.port (from ${EDGE_PORT})');
    expect(err).not.toContain('s3cr3t');
    expect(JSON.stringify(edge.lines)).not.toContain('s3cr3t');
  });

  it('`tenants` and `usage` go to the admin commands, not the gateway', async () => {
    const closed = await freePort();
    const list = await start({}, ['tenants', 'list', '--url', `http://127.0.0.1:${closed}`]);
    // The admin command's own exit code for an unreachable admin API; the gateway would have read a config.
    expect((await list.exited).code).toBe(1);
    expect(list.lines).toEqual([]);
    // Nothing listens there: the hint says what to check, not a stack.
    expect(list.stderr()).toContain(`cannot reach the admin API at http://127.0.0.1:${closed}: connection refused. Is queen-edge running`);
    expect(list.stderr()).not.toContain('    at ');
    const usage = await start({}, ['usage']);
    expect((await usage.exited).code).toBe(2);
    expect(usage.stderr()).toContain('queen-edge usage TENANT');
  });

  it('--admin-port moves the admin listener; a port already taken is one line naming it, not a stack', async () => {
    const taken = createServer();
    await new Promise<void>((done) => taken.listen(0, '127.0.0.1', done));
    const port = (taken.address() as AddressInfo).port;
    try {
      const edge = await start(onPortZero, ['--config', '{config}', '--admin-port', String(port)]);
      expect((await edge.exited).code).toBe(1);
      expect(edge.stderr()).toMatch(
        new RegExp(`^queen-edge: admin listener cannot listen on 127\\.0\\.0\\.1:${port}: address already in use \\(EADDRINUSE\\).*--admin-port\\)\n$`),
      );
    } finally {
      taken.close();
    }
  });

  it('an invalid config exits 2 and lists every problem', async () => {
    const edge = await start({ server: { workers: 2, drainTimeoutMs: -1 }, plans: {}, tenants: { t: { plan: 'nope', brokers: ['http://127.0.0.1:1'] } } });
    expect((await edge.exited).code).toBe(2);
    const err = edge.stderr();
    expect(err).toContain('server.drainTimeoutMs');
    expect(err).toContain('tenants.t.plan: unknown plan "nope"');
    expect(err).toContain('server.workers: more than one worker needs shared state');
  });

  it('two tenants on one broker not declared tenancy-aware: exits 2 and says why', async () => {
    const { plans } = testConfig(['http://127.0.0.1:1']);
    const edge = await start({
      plans,
      tenants: { a: { plan: 'test', brokers: ['http://127.0.0.1:6632'] }, b: { plan: 'test', brokers: ['http://LOCALHOST:6632/'] } },
    });
    expect((await edge.exited).code).toBe(2);
    expect(edge.stderr()).toContain('tenants.b.brokers: tenant "b" and tenant "a" both list broker "http://LOCALHOST:6632/"');
    expect(edge.stderr()).toContain('set tenancyAwareBrokers: true on tenant "b" and tenant "a"');
    expect(edge.stderr()).not.toContain('    at ');
  });
});
