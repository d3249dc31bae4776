/** `npm run demo` from a fresh clone: the printed commands work as printed; the development broker follows the contract. */
import { spawn, execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startDevBroker, type DevBroker } from '../../examples/dev-broker.js';

const ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);
const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

// Starts the demo under tsx and runs curl and node: seconds each on a loaded machine.
describe('npm run demo', { timeout: 60_000 }, () => {
  it('prints a token and curls that push, pop and ack through the edge (pasted twice too), the browser page link and a console link', async () => {
    const { scripts } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(scripts.demo).toBe('tsx examples/demo.ts');
    const child = spawn(process.execPath, ['--import', 'tsx', 'examples/demo.ts', '--port', '0', '--admin-port', '0', '--browser-port', '0'], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((done) => child.once('exit', (code) => done(code)));
    cleanup.push(async () => {
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
    });
    let out = '';
    child.stdout!.setEncoding('utf8');
    await new Promise<void>((done, fail) => {
      child.stdout!.on('data', (c: string) => {
        out += c;
        if (out.includes('Ctrl-C stops the demo.')) done();
      });
      child.once('exit', () => fail(new Error(`demo exited early:\n${out}`)));
    });
    const block = /# --- demo commands ---\n([\s\S]*?)# --- end of demo commands ---/.exec(out)![1]!;
    expect(out).toContain('NOT FOR PRODUCTION');

    const { stdout } = await run('bash', ['-e', '-c', block], { cwd: ROOT });
    const [pushed, popped, acked] = stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(pushed).toEqual([expect.objectContaining({ status: 'queued', transaction_id: 'hello-1' })]);
    expect(popped).toMatchObject({ success: true, messages: [{ transactionId: 'hello-1', data: { hello: 'world' } }] });
    expect(acked).toEqual([expect.objectContaining({ success: true, noop: false })]);
    // The same push again is deduplicated by its transactionId.
    const pushLine = block.split('\n').find((l) => l.includes('/api/v1/push'))!;
    const again = await run('bash', ['-e', '-c', `${block.split('\n')[0]}\n${pushLine}`]);
    expect(JSON.parse(again.stdout)).toEqual([expect.objectContaining({ status: 'duplicate', message_id: pushed[0].message_id })]);

    const link = /^ {2}(http:\/\/127\.0\.0\.1:\d+)\/#proxy=([^&]+)&token=(\S+)$/m.exec(out)!;
    const page = await request(`${link[1]}/`);
    expect(page.statusCode).toBe(200);
    expect(await page.body.text()).toContain('Queen from the browser');
    expect(decodeURIComponent(link[2]!)).toMatch(/^https:\/\/localhost:\d+$/);

    // Pasted again: the message is acked, the pop finds nothing, and the ack step says so (no Node stack).
    const twice = await run('bash', ['-c', block], { cwd: ROOT });
    expect(twice.stderr).toContain('nothing to ack: the pop answered no message');
    expect(twice.stderr).not.toContain('SyntaxError');

    // The console link: its page, and its token reads and (in memory, no Redis) suspends the demo tenant.
    const consoleLink = /^ {2}(http:\/\/127\.0\.0\.1:\d+)\/console#token=(\w+)$/m.exec(out)!;
    const consolePage = await request(`${consoleLink[1]}/console`);
    expect(consolePage.statusCode).toBe(200);
    expect(await consolePage.body.text()).toContain('queen-edge console');
    const adminCall = async (method: 'GET' | 'POST', path: string) => {
      const r = await request(`${consoleLink[1]}${path}`, { method, headers: { authorization: `Bearer ${consoleLink[2]}` } });
      return { status: r.statusCode, json: (await r.body.json()) as any };
    };
    const listed = await adminCall('GET', '/admin/v1/tenants');
    expect(listed.json.tenants).toEqual([expect.objectContaining({ id: 'default', status: 'active' })]);
    expect((await adminCall('GET', '/admin/v1/plans')).json).toMatchObject({ writable: true });
    expect((await adminCall('POST', '/admin/v1/tenants/default/suspend')).json).toMatchObject({ status: 'suspended' });
    const refused = await run('bash', ['-c', `${block.split('\n')[0]}\n${pushLine}`]);
    expect(JSON.parse(refused.stdout)).toMatchObject({ code: 'cluster_suspended' });
    expect((await adminCall('POST', '/admin/v1/tenants/default/resume')).json).toMatchObject({ status: 'active' });

    child.kill('SIGINT');
    expect(await exited).toBe(0);
  });
});

describe('the development broker', () => {
  let broker: DevBroker;
  const call = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
    const res = await request(`${broker.url}${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    const text = await res.body.text();
    return { status: res.statusCode, text, json: text ? JSON.parse(text) : undefined };
  };

  it('answers /health; an empty pop is a bodiless 204; a long poll wakes on a push', async () => {
    broker = await startDevBroker();
    cleanup.push(() => broker.close());
    expect((await call('GET', '/health')).status).toBe(200);
    const empty = await call('GET', '/api/v1/pop/queue/q');
    expect(empty).toMatchObject({ status: 204, text: '' });
    const parked = call('GET', '/api/v1/pop/queue/q?wait=true&timeout=15000');
    await call('POST', '/api/v1/push', { items: [{ queue: 'q', payload: 1 }] });
    expect((await parked).json).toMatchObject({ success: true, messages: [{ data: 1 }] });
  });

  it('leases a batch to one consumer per group; an ack needs the live lease and commits the cursor', async () => {
    broker = await startDevBroker();
    cleanup.push(() => broker.close());
    await call('POST', '/api/v1/push', {
      items: [
        { queue: 'q', transactionId: 'a', payload: 1 },
        { queue: 'q', transactionId: 'b', payload: 2 },
      ],
    });
    const first = (await call('GET', '/api/v1/pop/queue/q?batch=10&consumerGroup=g')).json;
    expect(first.messages.map((m: { transactionId: string }) => m.transactionId)).toEqual(['a', 'b']);
    expect((await call('GET', '/api/v1/pop/queue/q?consumerGroup=g')).status).toBe(204);
    expect((await call('GET', '/api/v1/pop/queue/q?consumerGroup=other')).json.messages).toHaveLength(1);
    const wrong = await call('POST', '/api/v1/ack', { transactionId: 'b', partitionId: first.partitionId, leaseId: 'nope', consumerGroup: 'g' });
    expect(wrong.json).toEqual([expect.objectContaining({ success: false, error: 'invalid or expired lease' })]);
    const ok = await call('POST', '/api/v1/ack', { transactionId: 'b', partitionId: first.partitionId, leaseId: first.leaseId, consumerGroup: 'g' });
    expect(ok.json).toEqual([expect.objectContaining({ success: true, leaseReleased: true })]);
    // Acking b committed a too: nothing is left for g.
    expect((await call('GET', '/api/v1/pop/queue/q?consumerGroup=g')).status).toBe(204);
  });
});
