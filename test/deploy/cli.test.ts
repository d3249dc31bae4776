/** The CLI as a process: usage, dispatch to the admin commands, exit 2 with every config problem. */
import { afterEach, describe, expect, it } from 'vitest';
import { edgeTracker, freePort, type EdgeProcess } from './edge-process.js';

const edges = edgeTracker();
afterEach(() => edges.cleanup());
const start = edges.start;

describe('queen-edge command line', () => {
  it('--help prints the usage and exits 0', async () => {
    const edge = await start({}, ['--help']);
    expect((await edge.exited).code).toBe(0);
    expect(edge.lines.map((l) => l.msg).join('\n')).toMatch(/^usage: queen-edge \[--config PATH\]/);
  });

  it('unknown arguments: usage on stderr, exit 2', async () => {
    const edge = await start({}, ['--bogus']);
    expect((await edge.exited).code).toBe(2);
    expect(edge.stderr()).toContain('unexpected arguments: --bogus');
  });

  it('`tenants` and `usage` go to the admin commands, not the gateway', async () => {
    const closed = await freePort();
    const list = await start({}, ['tenants', 'list', '--url', `http://127.0.0.1:${closed}`]);
    // The admin command's own exit code for an unreachable admin API; the gateway would have read a config.
    expect((await list.exited).code).toBe(1);
    expect(list.lines).toEqual([]);
    const usage = await start({}, ['usage']);
    expect((await usage.exited).code).toBe(2);
    expect(usage.stderr()).toContain('queen-edge usage TENANT');
  });

  it('an invalid config exits 2 and lists every problem', async () => {
    const edge = await start({ server: { workers: 2, drainTimeoutMs: -1 }, plans: {}, tenants: { t: { plan: 'nope', brokers: ['http://127.0.0.1:1'] } } });
    expect((await edge.exited).code).toBe(2);
    const err = edge.stderr();
    expect(err).toContain('server.drainTimeoutMs');
    expect(err).toContain('tenants.t.plan: unknown plan "nope"');
    expect(err).toContain('server.workers: more than one worker needs shared state');
  });
});
