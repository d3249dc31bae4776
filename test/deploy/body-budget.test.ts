/**
 * Bodies in flight have budgets (docs/limits.md, "Bodies in flight"), measured on a real edge
 * process: a herd of near-complete uploads by one tenant (every byte but the last) adds to the
 * process's RSS no more than the tenant's budget of buffered bytes plus the connections'
 * overhead, instead of every body. The uploads let in are those the budget holds; the rest are
 * refused from their heads. Those let in are charged to the tenant's request bucket when their
 * body deadline ends them.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, TEST_SECRET, token } from '../helpers/edge.js';
import { edgeTracker } from './edge-process.js';

const edges = edgeTracker();
let broker: BrokerDouble | null = null;
afterEach(async () => {
  await edges.cleanup();
  await broker?.close();
});

const MiB = 1024 * 1024;
const UPLOADS = 150;
/** Each upload declares just under 1 MiB (the plan's maxPayloadBytes) and sends all of it but the last byte. */
const LENGTH = MiB - 1024;
const TENANT_BUDGET = 8 * MiB;
const BURST = 1000;

/** kB of a /proc/<pid>/status field. */
async function procKb(pid: number, field: 'VmRSS' | 'VmHWM'): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]);
}

/** Sends the head and all of the body but its last byte; resolves with the status line that came back, or the socket's error. */
function nearComplete(port: number, head: string, body: Buffer): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let answer = '';
    socket.on('data', (d: Buffer) => {
      answer += d.toString('latin1');
    });
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (answer === '') answer = err.code ?? 'error';
    });
    socket.once('close', () => resolve(answer.split('\r\n')[0]!));
    socket.write(head);
    socket.write(body);
  });
}

describe('one tenant uploading a herd of near-complete bodies', () => {
  it('adds at most its budget to the RSS and is charged for the uploads let in', async () => {
    broker = await startBrokerDouble();
    const edge = await edges.start({
      server: {
        workers: 1,
        https: { port: null },
        http: { host: '127.0.0.1', port: 0 },
        admin: { host: '127.0.0.1', port: 0 },
        bodyBudget: { perTenantBytes: TENANT_BUDGET, perProcessBytes: 2 * TENANT_BUDGET, deadlineMs: 800 },
      },
      log: { level: 'info' },
      auth: { secret: TEST_SECRET },
      plans: { herd: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 0.001, requestBurst: BURST } } },
      tenants: { acme: { plan: 'herd', hosts: ['acme.localhost'], brokers: [broker.url] } },
    });
    const listening = await edge.waitForLog((l) => l.msg === 'queen-edge listening');
    const port = (listening.http as { port: number }).port;
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const headers = { host: 'acme.localhost', authorization: `Bearer ${tok}` };

    const herd = (length: number): Promise<string[]> => {
      const head = `POST /api/v1/push HTTP/1.1\r\nhost: acme.localhost\r\nauthorization: Bearer ${tok}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
      const body = Buffer.alloc(length - 1, 0x20);
      return Promise.all(Array.from({ length: UPLOADS }, () => nearComplete(port, head, body)));
    };
    // The same herd with 100-byte bodies first, all let in: the process's heap and buffers grow to
    // what as many connections and requests take, so the measure below is of the bodies alone.
    const small = await herd(100);
    expect(small.filter((a) => a.startsWith('HTTP/1.1 408')).length).toBe(UPLOADS);
    const before = await procKb(edge.pid, 'VmRSS');
    // Resets the peak RSS (VmHWM) to the current RSS.
    await writeFile(`/proc/${edge.pid}/clear_refs`, '5');
    const answers = await herd(LENGTH);
    const peakKb = (await procKb(edge.pid, 'VmHWM')) - before;

    // Let in: what the budget holds, ended by the body deadline (408) once the edge had read all of them.
    const letIn = Math.floor(TENANT_BUDGET / LENGTH);
    const counts = { letIn: answers.filter((a) => a.startsWith('HTTP/1.1 408')).length, refused: answers.filter((a) => a.startsWith('HTTP/1.1 429')).length };
    expect(counts.letIn).toBe(letIn);
    // The others were refused from their heads; a client still writing when its connection was closed may see a reset instead.
    expect(answers.filter((a) => !a.startsWith('HTTP/1.1 408') && !a.startsWith('HTTP/1.1 429') && !/^E[A-Z]+$/.test(a))).toEqual([]);
    expect(counts.refused).toBeGreaterThan(0);
    // The measure: the budget, plus one 64 KiB socket read per connection (a refused upload's first
    // read, head and the start of its body) and slack for the heap, far below the bodies sent (150 MiB).
    console.log(`body herd: RSS peak +${(peakKb / 1024).toFixed(1)} MiB over ${(before / 1024).toFixed(1)} MiB; ${counts.letIn} let in, ${counts.refused} refused with 429`);
    expect(peakKb * 1024).toBeLessThan(TENANT_BUDGET + UPLOADS * 64 * 1024 + 12 * MiB);

    // Charged: the small herd, the uploads let in, and this request.
    const after = await request(`http://127.0.0.1:${port}/api/v1/resources/queues`, { headers });
    await after.body.dump();
    expect(after.headers['ratelimit']).toMatch(new RegExp(`^"requests";r=${BURST - UPLOADS - letIn - 1};`));
  }, 20_000);
});
