// One-off measurement (not committed): a few thousand mixed requests, access-log lines counted by status.
import http2 from 'node:http2';
import https from 'node:https';
import { startBrokerDouble } from '../test/helpers/broker-double.js';
import { startEdge, testConfig, token, TEST_PLAN } from '../test/helpers/edge.js';
import { capturingLogger } from '../test/helpers/logs.js';

const broker = await startBrokerDouble();
const captured = capturingLogger('info');
const big = { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, maxPayloadBytes: 8 * 1048576 } };
const edge = await startEdge(testConfig([broker.url], { plans: { test: big } }), { log: captured.log });
const session = http2.connect(edge.url, { rejectUnauthorized: false });
const rw = await token({ roles: ['read-write'], tenant: 'acme' });
const agent = new https.Agent({ keepAlive: true, maxSockets: 8, rejectUnauthorized: false });

type R = { status: number; bytes: number; json: any };
function send(h2: boolean, slow: boolean, method: string, path: string, body?: unknown, auth = `Bearer ${rw}`): Promise<R> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const headers: Record<string, string> = { authorization: auth, ...(payload ? { 'content-type': 'application/json' } : {}) };
  return new Promise((resolve, reject) => {
    const collect = (status: number, s: any) => {
      if (slow) s.pause();
      const chunks: Buffer[] = [];
      s.on('data', (c: Buffer) => chunks.push(c));
      s.on('end', () => {
        const b = Buffer.concat(chunks);
        let json: any;
        try { json = b.length ? JSON.parse(b.toString()) : undefined; } catch {}
        resolve({ status, bytes: b.length, json });
      });
      if (slow) setTimeout(() => s.resume(), 20);
    };
    if (h2) {
      const st = session.request({ ':method': method, ':path': path, ':authority': 'acme.localhost', ...headers }, { endStream: !payload });
      if (payload) st.end(payload);
      st.on('response', (h) => collect(Number(h[':status']), st));
      st.on('error', reject);
    } else {
      const req = https.request(`${edge.url}${path}`, { method, headers: { host: 'acme.localhost', ...headers }, agent });
      req.on('response', (res) => collect(res.statusCode!, res));
      req.on('error', reject);
      req.end(payload);
    }
  });
}

const rnd = (n: number) => Math.floor(Math.random() * n);
const clientStatus = new Map<number, number>();
let n = 0;
async function worker(w: number, rounds: number) {
  for (let i = 0; i < rounds; i++) {
    const h2 = (w + i) % 2 === 0;
    const slow = i % 3 === 0;
    const queue = `mix-${w}`;
    const count = [1, 5, 40, 150][rnd(4)]!;
    const txLen = [20, 300, 1500][rnd(3)]!;
    const items = Array.from({ length: count }, (_, k) => ({ queue, transactionId: `${w}-${i}-${k}-`.padEnd(txLen, 'x'), payload: { k } }));
    const rec = (r: R) => { clientStatus.set(r.status, (clientStatus.get(r.status) ?? 0) + 1); n++; return r; };
    rec(await send(h2, slow, 'POST', '/api/v1/push', { items }));
    const pop = rec(await send(h2, slow, 'GET', `/api/v1/pop/queue/${queue}?batch=${count}`));
    if (pop.status === 200) {
      rec(await send(h2, slow, 'POST', '/api/v1/ack/batch', { acknowledgments: pop.json.messages.map((m: any) => ({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, status: 'completed' })) }));
    }
    rec(await send(h2, slow, 'GET', `/api/v1/pop/queue/empty-${w}`)); // 204
    rec(await send(h2, slow, 'POST', '/api/v1/transaction', { operations: [{ type: 'push', items: items.slice(0, 5).map((x) => ({ ...x, transactionId: `t${x.transactionId}` })) }] }));
    if (i % 4 === 0) rec(await send(h2, slow, 'GET', '/api/v1/resources/queues'));
    if (i % 10 === 0) rec(await send(h2, slow, 'GET', '/api/v1/kv/x')); // 403 feature_gated
    if (i % 10 === 5) rec(await send(h2, slow, 'GET', '/api/v1/resources/queues', undefined, 'Bearer nope')); // 401
    // Keep the queue small: drain what the transaction pushed.
    const p2 = rec(await send(h2, false, 'GET', `/api/v1/pop/queue/${queue}?batch=1000&autoAck=true`));
    void p2;
  }
}
const t0 = Date.now();
await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w, 60)));
const ms = Date.now() - t0;
await new Promise((r) => setTimeout(r, 300));
const logStatus = new Map<number, number>();
for (const l of captured.lines) if (l.msg === 'request') logStatus.set(l.status as number, (logStatus.get(l.status as number) ?? 0) + 1);
const sort = (m: Map<number, number>) => Object.fromEntries([...m].sort((a, b) => a[0] - b[0]));
console.log(JSON.stringify({ requests: n, ms, clientStatus: sort(clientStatus), logStatus: sort(logStatus), logLines: [...logStatus.values()].reduce((a, b) => a + b, 0) }));
session.close();
agent.destroy();
await edge.close();
await broker.close();
