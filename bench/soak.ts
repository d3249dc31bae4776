/**
 * `npm run soak [-- --requests N --concurrency C --parked P]`: a long mixed run through a real
 * queen-edge process, with Redis and broker restarts along the way. Reports RSS of
 * the proxy over time, answers by status and code, and admin-probe latency as a stand-in for the
 * proxy's event-loop delay. Everything runs on loopback and stops by itself.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { SignJWT } from 'jose';
import { Agent, request } from 'undici';
import { freePort, sleep } from './procs.js';

const { values: args } = parseArgs({
  options: {
    requests: { type: 'string', default: '1000000' },
    concurrency: { type: 'string', default: '32' },
    parked: { type: 'string', default: '200' },
    out: { type: 'string', default: '' },
  },
});
const TOTAL = Number(args.requests);
const CONCURRENCY = Number(args.concurrency);
const PARKED = Number(args.parked);
const SECRET = 'soak-secret-soak-secret-soak-secret!!';

/** A minimal broker: push 201 array, pop 200 with one message or a bodiless 204, parks `wait=true`. */
function startBroker(port: number): Promise<Server> {
  let seq = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = req.url ?? '/';
      const json = (status: number, body: unknown) => {
        const text = JSON.stringify(body);
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      };
      if (url === '/health') return json(200, { status: 'healthy' });
      if (url.startsWith('/api/v1/push')) {
        const items = (JSON.parse(Buffer.concat(chunks).toString() || '{"items":[]}') as { items: unknown[] }).items;
        return json(
          201,
          items.map((_, index) => ({ index, message_id: `m${++seq}`, transaction_id: `t${seq}`, queueName: 'soak', status: 'queued' })),
        );
      }
      if (url.startsWith('/api/v1/pop')) {
        const wait = url.includes('wait=true');
        const answer = () => {
          if (seq % 3 === 0 || wait) {
            res.writeHead(204);
            res.end();
          } else {
            json(200, {
              success: true,
              leaseId: `l${seq}`,
              partitionId: 'p1',
              messages: [{ id: `m${seq}`, transactionId: `t${seq}`, data: { n: seq }, partitionId: 'p1', leaseId: `l${seq}` }],
            });
          }
        };
        if (!wait) return answer();
        const timeout = Number(new URL(url, 'http://x').searchParams.get('timeout') ?? 1000);
        const t = setTimeout(answer, Math.min(timeout, 2000));
        res.on('close', () => clearTimeout(t));
        return;
      }
      if (url.startsWith('/api/v1/ack')) return json(200, [{ index: 0, success: true, error: null, leaseReleased: true, dlq: false, noop: false }]);
      json(404, { error: 'not found' });
    });
  });
  server.keepAliveTimeout = 30000;
  return new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(server)));
}

function startRedis(port: number, dir: string): ChildProcess {
  return spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
}

async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'queen-edge-soak-'));
  const [brokerPort, redisPort, httpsPort, adminPort] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  let broker = await startBroker(brokerPort);
  let redis = startRedis(redisPort, dir);
  await sleep(300);
  const configPath = join(dir, 'soak.yaml');
  await writeFile(
    configPath,
    `server:
  https: { host: 127.0.0.1, port: ${httpsPort} }
  workers: 1
  admin: { host: 127.0.0.1, port: ${adminPort}, token: soak-admin }
log: { level: warn, accessLog: false }
redis: { url: "redis://127.0.0.1:${redisPort}", keyPrefix: "soak:", failMode: local, timeoutMs: 50 }
auth: { secret: "${SECRET}", defaultTenant: default }
upstream: { healthIntervalMs: 500, upAfter: 1 }
plans:
  soak:
    limits: { requestsPerSec: 1000000, requestBurst: 1000000, messagesPerSec: 10000000, messageBurst: 10000000, parkedPolls: 100000, maxPayloadBytes: 1048576, maxBatch: 1000 }
    quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 }
    storageBytes: 0
tenants:
  default: { plan: soak, hosts: [127.0.0.1, localhost], brokers: ["http://127.0.0.1:${brokerPort}"] }
`,
  );
  const proxy = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', '--config', configPath], { stdio: ['ignore', 'inherit', 'inherit'] });
  const base = `https://127.0.0.1:${httpsPort}`;
  const agent = new Agent({ connect: { rejectUnauthorized: false }, connections: CONCURRENCY + PARKED + 8, keepAliveTimeout: 30000 });
  for (let i = 0; i < 100; i++) {
    const ok = await request(`http://127.0.0.1:${adminPort}/livez`).then(
      (r) => {
        r.body.dump();
        return r.statusCode === 200;
      },
      () => false,
    );
    if (ok) break;
    await sleep(100);
  }
  const token = await new SignJWT({ roles: ['read-write'], tenant: 'default' })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('soak')
    .setExpirationTime('2h')
    .sign(new TextEncoder().encode(SECRET));
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };

  const answers = new Map<string, number>();
  const count = (key: string) => answers.set(key, (answers.get(key) ?? 0) + 1);
  const samples: { atS: number; done: number; rssMiB: number; probeMs: number }[] = [];
  let done = 0;
  let stopping = false;
  const started = performance.now();

  const one = async (i: number): Promise<void> => {
    const kind = i % 10;
    const path = kind < 5 ? '/api/v1/push' : kind < 8 ? `/api/v1/pop/queue/q${i % 50}?consumerGroup=g` : '/api/v1/ack';
    const body =
      kind < 5
        ? `{"items":[{"queue":"q${i % 50}","partition":"p","transactionId":"s${i}","payload":{"i":${i}}}]}`
        : kind < 8
          ? undefined
          : '{"transactionId":"t1","partitionId":"p1","leaseId":"l1"}';
    try {
      const r = await request(`${base}${path}`, { method: body ? 'POST' : 'GET', headers, body, dispatcher: agent, headersTimeout: 10000, bodyTimeout: 10000 });
      const text = await r.body.text();
      count(r.statusCode < 400 ? String(r.statusCode) : `${r.statusCode} ${(JSON.parse(text || '{}') as { code?: string }).code ?? ''}`);
    } catch (err) {
      count(`client error ${(err as { code?: string }).code ?? (err as Error).name}`);
    }
  };
  const worker = async (): Promise<void> => {
    while (!stopping) {
      const i = done++;
      if (i >= TOTAL) return;
      await one(i);
    }
  };
  const parked = async (): Promise<void> => {
    while (!stopping) {
      try {
        const r = await request(`${base}/api/v1/pop/queue/parked?wait=true&timeout=1500`, { headers, dispatcher: agent, headersTimeout: 10000 });
        await r.body.dump();
        count(`parked ${r.statusCode}`);
        // A refused poll comes back at once; back off as a client would.
        if (r.statusCode >= 400) await sleep(200);
      } catch {
        count('parked client error');
        await sleep(100);
      }
    }
  };
  const sampler = setInterval(async () => {
    const t0 = performance.now();
    await request(`http://127.0.0.1:${adminPort}/livez`).then(
      (r) => r.body.dump(),
      () => undefined,
    );
    samples.push({
      atS: Math.round((performance.now() - started) / 1000),
      done: Math.min(done, TOTAL),
      rssMiB: Math.round((await rssKb(proxy.pid!)) / 1024),
      probeMs: Math.round((performance.now() - t0) * 10) / 10,
    });
  }, 5000);

  const restarts: string[] = [];
  const chaos = (async () => {
    while (done < TOTAL * 0.3 && !stopping) await sleep(200);
    restarts.push(`redis killed at ${done}`);
    redis.kill('SIGKILL');
    await sleep(3000);
    redis = startRedis(redisPort, dir);
    restarts.push(`redis restarted at ${done}`);
    while (done < TOTAL * 0.6 && !stopping) await sleep(200);
    restarts.push(`broker stopped at ${done}`);
    await new Promise<void>((r) => {
      broker.close(() => r());
      broker.closeAllConnections();
    });
    await sleep(2000);
    broker = await startBroker(brokerPort);
    restarts.push(`broker restarted at ${done}`);
  })();

  const parkers = Array.from({ length: PARKED }, parked);
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  stopping = true;
  clearInterval(sampler);
  await chaos;
  await Promise.allSettled(parkers);
  const seconds = (performance.now() - started) / 1000;
  const summary = {
    date: new Date().toISOString(),
    requests: TOTAL,
    concurrency: CONCURRENCY,
    parkedPolls: PARKED,
    seconds: Math.round(seconds),
    requestsPerSec: Math.round(TOTAL / seconds),
    answers: Object.fromEntries([...answers].sort((a, b) => b[1] - a[1])),
    restarts,
    samples,
  };
  proxy.kill('SIGTERM');
  const exit = await new Promise<number | null>((r) => proxy.once('exit', (code) => r(code)));
  redis.kill('SIGKILL');
  broker.close();
  broker.closeAllConnections();
  await agent.destroy();
  const text = JSON.stringify({ ...summary, proxyExitCode: exit }, null, 2);
  if (args.out) await writeFile(args.out, text);
  process.stdout.write(`${text}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`soak: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
