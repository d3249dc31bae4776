/**
 * Bodies in flight have budgets (docs/limits.md, "Bodies in flight"), measured on a real edge
 * process: a herd of near-complete uploads by one tenant (every byte but the last) adds to the
 * process's RSS no more than the tenant's budget of buffered bytes plus the connections'
 * overhead, instead of every body. The uploads let in are those the budget holds; the rest are
 * refused from their heads. Those let in are charged to the tenant's request bucket when their
 * body deadline ends them.
 */
import { readFile, writeFile } from 'node:fs/promises';
import http2 from 'node:http2';
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
const UPLOADS = 120;
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

/** An edge process with an 8 MiB tenant budget, the tenant's token, and where to find its listeners. */
async function herdEdge(): Promise<{ pid: number; httpPort: number; httpsPort: number; tok: string }> {
  broker = await startBrokerDouble();
  const edge = await edges.start({
    server: {
      workers: 1,
      https: { host: '127.0.0.1', port: 0 },
      http: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      bodyBudget: { perTenantBytes: TENANT_BUDGET, perProcessBytes: 2 * TENANT_BUDGET, deadlineMs: 500 },
    },
    log: { level: 'info' },
    auth: { secret: TEST_SECRET },
    plans: { herd: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 0.001, requestBurst: BURST } } },
    tenants: { acme: { plan: 'herd', hosts: ['acme.localhost'], brokers: [broker.url] } },
  });
  const listening = await edge.waitForLog((l) => l.msg === 'queen-edge listening');
  return {
    pid: edge.pid,
    httpPort: (listening.http as { port: number }).port,
    httpsPort: (listening.https as { port: number }).port,
    tok: await token({ roles: ['read-write'], tenant: 'acme' }),
  };
}

/**
 * Runs a warm-up herd of 100-byte bodies (all let in: the process's heap and buffers grow to what
 * as many connections and requests take, so the measure is of the bodies alone), then the herd of
 * near-complete 1 MiB bodies: its answers and the RSS peak it added, in kB.
 */
async function measure(pid: number, herd: (length: number) => Promise<string[]>): Promise<{ answers: string[]; peakKb: number }> {
  const small = await herd(100);
  expect(small.filter((a) => a === '408').length).toBe(UPLOADS);
  const before = await procKb(pid, 'VmRSS');
  // Resets the peak RSS (VmHWM) to the current RSS.
  await writeFile(`/proc/${pid}/clear_refs`, '5');
  const answers = await herd(LENGTH);
  return { answers, peakKb: (await procKb(pid, 'VmHWM')) - before };
}

/**
 * Let in: what the budget holds, ended by the body deadline (408) once the edge had read all of
 * them; the others refused from their heads. On a busy machine the herd may still be arriving when
 * the first ones reach their deadline and give their bytes back, so more than one budget's worth
 * can be let in over the herd: the bound held at any moment is what the RSS peak shows.
 */
function expectHeld(answers: string[], peakKb: number, proto: string): number {
  const letIn = answers.filter((a) => a === '408').length;
  const refused = answers.filter((a) => a === '429').length;
  expect(letIn).toBeGreaterThanOrEqual(Math.floor(TENANT_BUDGET / LENGTH));
  // A client still writing when its connection was closed may see a reset instead of the 429.
  expect(answers.filter((a) => a !== '408' && a !== '429' && !/^E[A-Z]+$/.test(a))).toEqual([]);
  expect(refused).toBeGreaterThan(0);
  console.log(`${proto} body herd: RSS peak +${(peakKb / 1024).toFixed(1)} MiB; ${letIn} let in, ${refused} refused with 429`);
  // The budget, plus one 64 KiB socket read (h1) or stream window (h2) per refused upload, and
  // slack for the heap: far below the bodies sent (120 MiB).
  expect(peakKb * 1024).toBeLessThan(TENANT_BUDGET + UPLOADS * 64 * 1024 + 12 * MiB);
  return letIn;
}

describe('one tenant uploading a herd of near-complete bodies', () => {
  it('HTTP/1.1: adds at most its budget to the RSS and is charged for the uploads let in', async () => {
    const { pid, httpPort, tok } = await herdEdge();
    const herd = (length: number): Promise<string[]> => {
      const head = `POST /api/v1/push HTTP/1.1\r\nhost: acme.localhost\r\nauthorization: Bearer ${tok}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
      const body = Buffer.alloc(length - 1, 0x20);
      return Promise.all(Array.from({ length: UPLOADS }, () => nearComplete(httpPort, head, body).then((line) => line.replace(/^HTTP\/1\.1 (\d+) .*$/, '$1'))));
    };
    const { answers, peakKb } = await measure(pid, herd);
    const letIn = expectHeld(answers, peakKb, 'h1');
    // Charged: the warm-up herd, the uploads let in, and this request.
    const after = await request(`http://127.0.0.1:${httpPort}/api/v1/resources/queues`, {
      headers: { host: 'acme.localhost', authorization: `Bearer ${tok}` },
    });
    await after.body.dump();
    expect(after.headers.ratelimit).toMatch(new RegExp(`^"requests";r=${BURST - UPLOADS - letIn - 1};`));
  }, 20_000);

  it('HTTP/2, on two sessions: adds at most its budget to the RSS', async () => {
    const { pid, httpsPort, tok } = await herdEdge();
    // The client buffers what it writes beyond the flow-control windows: room for it all (Node's default is 10 MB).
    const sessions = [0, 1].map(() => http2.connect(`https://127.0.0.1:${httpsPort}`, { rejectUnauthorized: false, maxSessionMemory: 1024 }));
    try {
      for (const s of sessions) s.on('error', () => {});
      const herd = (length: number): Promise<string[]> => {
        const body = Buffer.alloc(length - 1, 0x20);
        return Promise.all(
          Array.from({ length: UPLOADS }, (_, i) => {
            const stream = sessions[i % 2]!.request(
              {
                ':method': 'POST',
                ':path': '/api/v1/push',
                ':authority': 'acme.localhost',
                authorization: `Bearer ${tok}`,
                'content-type': 'application/json',
                'content-length': String(length),
              },
              { endStream: false },
            );
            stream.on('error', () => {});
            stream.write(body);
            return new Promise<string>((resolve) => {
              let status = '';
              stream.once('response', (h) => {
                status = String(h[':status']);
              });
              stream.resume();
              stream.once('close', () => resolve(status || `E${stream.rstCode}`));
            });
          }),
        );
      };
      const { answers, peakKb } = await measure(pid, herd);
      expectHeld(answers, peakKb, 'h2');
    } finally {
      for (const s of sessions) s.destroy();
    }
  }, 20_000);
});
