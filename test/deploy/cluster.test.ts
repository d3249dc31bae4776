/**
 * The CLI with two workers (node:cluster, run through tsx so the workers inherit `--import tsx`):
 * both workers serve, a killed worker is replaced while traffic continues, and SIGTERM drains (the
 * listening port is refused at once, an in-flight poll completes, a parked one is aborted upstream
 * at drainTimeoutMs) before the primary exits 0.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, TEST_SECRET, token } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { FIELD_NAMES } from '../../src/metering/counts.js';
import { connectionRefused, freePort, freshRequest, spawnEdge, type EdgeProcess, type LogLine } from './edge-process.js';

/**
 * Long enough that "refused while a parked poll still runs" is observable on a loaded machine:
 * the checks below wait for their signal up to the drain deadline, not within a tight window.
 */
const DRAIN_MS = 4000;

let broker: BrokerDouble;
let edge: EdgeProcess;
let rw: string;
let rwBeta: string;
let httpsPort: number;
let adminPort: number;
const prefix = uniquePrefix();

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  rw = await token({ roles: ['read-write'], tenant: 'acme' });
  rwBeta = await token({ roles: ['read-write'], tenant: 'beta' });
  httpsPort = await freePort();
  adminPort = await freePort();
  edge = await spawnEdge({
    server: {
      https: { host: '127.0.0.1', port: httpsPort },
      admin: { host: '127.0.0.1', port: adminPort },
      workers: 2,
      drainTimeoutMs: DRAIN_MS,
    },
    log: { level: 'info' },
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
    auth: { secret: TEST_SECRET },
    // A probe timeout a loaded machine does not trip (at 200 ms the broker was marked down: 503 no_upstream).
    upstream: { healthIntervalMs: 200, healthTimeoutMs: 2000 },
    plans: { test: TEST_PLAN },
    tenants: {
      // acme and beta share one broker double: declared tenancy-aware, as a shared broker must be.
      acme: { plan: 'test', hosts: ['acme.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
      // Only the drain test uses beta, so its metered totals are known exactly.
      beta: { plan: 'test', hosts: ['beta.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
    },
  });
  // Two workers starting through tsx on a loaded machine: generous, it returns as soon as they listen.
  await edge.waitForLog((l) => l.msg === 'all workers listening', 60_000);
}, 90_000);

afterAll(async () => {
  await edge?.kill();
  await broker?.close();
  const redis = await connectTest(SHARED_REDIS_URL, 2000);
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

/** One request on a connection of its own, so the primary's round-robin hands it to the next worker. */
function send(method: 'GET' | 'POST', path: string, body?: unknown, tenant = { host: 'acme.localhost', jwt: '' }): Promise<{ status: number; text: string }> {
  return freshRequest(`https://127.0.0.1:${httpsPort}${path}`, {
    method,
    headers: { host: tenant.host, authorization: `Bearer ${tenant.jwt || rw}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
}

const push = (queue: string, n: number) => send('POST', '/api/v1/push', { items: [{ queue, transactionId: `${queue}-${n}`, payload: { n } }] });

/** Workers that wrote access-log lines for successful pushes since log line `since` (the access line carries the worker id). */
function servingWorkers(since: number): Set<number> {
  return new Set(
    edge.lines
      .slice(since)
      .filter((l) => l.route !== undefined && l.status === 201)
      .map((l) => l.worker!),
  );
}

function listening(): LogLine[] {
  return edge.lines.filter((l) => l.msg === 'worker listening');
}

describe('queen-edge with two workers', () => {
  it('both workers serve traffic and share one self-signed certificate', async () => {
    const mark = edge.lines.length;
    const certs = new Set<string>();
    for (let i = 0; i < 8; i++) {
      const r = await push('spread', i);
      expect(r.status).toBe(201);
    }
    await waitFor(() => servingWorkers(mark).size === 2, 10_000, 'access lines from both workers');
    // The primary generated it once; a worker generating its own would show a second fingerprint.
    for (let i = 0; i < 4; i++) certs.add(await peerFingerprint(httpsPort));
    expect(certs.size).toBe(1);
  });

  it('/metrics on the admin port (any worker answers) counts the requests of all workers', async () => {
    const res = await fetch(`http://127.0.0.1:${adminPort}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    // The 8 pushes above went to both workers; one worker's own registry would show about half.
    const pushes = text.split('\n').filter((l) => l.startsWith('queen_edge_requests_total{') && l.includes('tenant="acme"') && l.includes('status="2xx"'));
    expect(pushes.reduce((n, l) => n + Number(l.split(' ').at(-1)), 0)).toBe(8);
  });

  // A replacement worker starts through tsx: seconds on a loaded machine, so a bound of its own.
  it('a killed worker is replaced and traffic continues', async () => {
    const before = listening();
    expect(before).toHaveLength(2);
    const victim = before[0]!.workerPid as number;
    process.kill(victim, 'SIGKILL');
    await edge.waitForLog((l) => l.msg === 'worker died: replacing it' && l.workerPid === victim);
    // Meanwhile the survivor takes every connection.
    for (let i = 0; i < 4; i++) expect((await push('during', i)).status).toBe(201);
    const replacement = await edge.waitForLog((l) => l.msg === 'worker listening' && !before.some((b) => b.workerPid === l.workerPid), 45_000);
    const mark = edge.lines.length;
    for (let i = 0; i < 8; i++) expect((await push('after', i)).status).toBe(201);
    await waitFor(() => servingWorkers(mark).size === 2, 10_000, 'access lines from both workers');
    expect(servingWorkers(mark).has(replacement.worker as number)).toBe(true);
  }, 60_000);

  it('SIGTERM: port refused at once, in-flight poll completes, parked poll aborted at drainTimeoutMs, exit 0', async () => {
    // Settled results, so a failure shows in the assertions below rather than as an unhandled rejection.
    const completes = send('GET', '/api/v1/pop/queue/drain-completes?wait=true&timeout=10000').catch((err: Error) => ({ status: null, text: err.message }));
    const stays = send('GET', '/api/v1/pop/queue/drain-stays?wait=true&timeout=10000').then(
      (r) => ({ settledAt: Date.now(), status: r.status as number | null }),
      () => ({ settledAt: Date.now(), status: null }),
    );
    await waitFor(() => broker.parked() === 2, 5000, 'two parked polls');
    // Metered in memory and flushed each second per worker: SIGTERM right after must still land every count in Redis.
    for (let i = 0; i < 6; i++)
      expect(
        (await send('POST', '/api/v1/push', { items: [{ queue: 'beta-q', transactionId: `b-${i}`, payload: { i } }] }, { host: 'beta.localhost', jwt: rwBeta }))
          .status,
      ).toBe(201);
    const signalledAt = Date.now();
    process.kill(edge.pid, 'SIGTERM');
    await edge.waitForLog((l) => l.msg === 'draining workers');
    await waitFor(() => edge.lines.filter((l) => l.msg === 'draining').length === 2, DRAIN_MS, 'both workers draining');
    let staysSettled = false;
    void stays.then(() => (staysSettled = true));
    await waitFor(() => connectionRefused(httpsPort), DRAIN_MS, 'the HTTPS port to refuse connections');
    // Refused while the parked poll still runs: the listener closed on the signal, not at exit.
    expect(staysSettled).toBe(false);
    expect(broker.parked()).toBeGreaterThanOrEqual(1);

    // The broker delivers to the first poll while the edge drains: the response still reaches the client.
    const direct = await fetch(`${broker.url}/api/v1/push`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ items: [{ queue: 'drain-completes', payload: { late: true } }] }),
    });
    expect(direct.status).toBe(201);
    const done = await completes;
    expect(done.status).toBe(200);
    expect(done.text).toContain('"late":true');

    const parked = await stays;
    expect(parked.status).toBeNull();
    expect(parked.settledAt - signalledAt).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    await waitFor(() => broker.requests.some((r) => r.path === '/api/v1/pop/queue/drain-stays' && r.aborted), 2000, 'the upstream poll to be aborted');
    expect(await edge.exited).toEqual({ code: 0, signal: null });
    expect(edge.lines.filter((l) => l.msg === 'worker exited').map((l) => l.code)).toEqual([0, 0]);
    // A client of its own: other suites may CLIENT KILL connections on the shared Redis.
    const reader = await connectTest(SHARED_REDIS_URL, 2000);
    // SCAN to the end of its cursor: one call covers only part of the keyspace, and the shared
    // Redis holds other suites' keys too.
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, found] = await reader.scan(cursor, 'MATCH', `${prefix}{t:beta}:ud:*`, 'COUNT', 1000);
      cursor = next;
      keys.push(...found);
    } while (cursor !== '0');
    const total = { requests: 0, pushed: 0 };
    for (const key of keys) {
      for (const [field, n] of Object.entries(await reader.hgetall(key))) {
        if (field.endsWith(`:${FIELD_NAMES.requests}`)) total.requests += Number(n);
        if (field.endsWith(`:${FIELD_NAMES.messagesPushed}`)) total.pushed += Number(n);
      }
    }
    reader.disconnect();
    expect(total).toEqual({ requests: 6, pushed: 6 });
  });
});

/** SHA-256 fingerprint of the certificate a fresh TLS connection is served. */
async function peerFingerprint(port: number): Promise<string> {
  const { connect } = await import('node:tls');
  return new Promise((done, fail) => {
    const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, servername: 'localhost' }, () => {
      done(socket.getPeerCertificate().fingerprint256);
      socket.destroy();
    });
    socket.once('error', fail);
  });
}
