import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createHealthChecker, createHttpProbe, type HealthChange, type HealthChecker } from '../../src/upstream/health.js';
import { capturingLogger } from '../helpers/logs.js';

/** A broker double: answers GET /health with `status`, after `delayMs`, counting what it sees. */
interface FakeBroker {
  url: string;
  status: number;
  delayMs: number;
  hits: number;
  concurrent: number;
  maxConcurrent: number;
  server: Server;
}

const servers: Server[] = [];
const checkers: HealthChecker[] = [];

async function broker(status: number, delayMs = 0): Promise<FakeBroker> {
  const b = { status, delayMs, hits: 0, concurrent: 0, maxConcurrent: 0 } as FakeBroker;
  b.server = createServer((req, res) => {
    b.hits++;
    b.concurrent++;
    b.maxConcurrent = Math.max(b.maxConcurrent, b.concurrent);
    setTimeout(() => {
      b.concurrent--;
      res.statusCode = req.url === '/health' ? b.status : 404;
      res.end('{"status":"ok"}');
    }, b.delayMs);
  });
  servers.push(b.server);
  await new Promise<void>((r) => b.server.listen(0, '127.0.0.1', r));
  b.url = `http://127.0.0.1:${(b.server.address() as AddressInfo).port}`;
  return b;
}

/** A URL whose port refuses connections: a server that listened once and closed. */
async function closedUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((r) => s.close(() => r()));
  return `http://127.0.0.1:${port}`;
}

/** Resolves once the checks started so far have been judged (a scripted probe resolves at once). */
function checksDone(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

function logSink() {
  return capturingLogger('info');
}

function checker(opts: Partial<Parameters<typeof createHealthChecker>[0]> = {}) {
  const sink = logSink();
  const changes: HealthChange[] = [];
  const h = createHealthChecker({ intervalMs: 50, timeoutMs: 500, downAfter: 2, upAfter: 3, log: sink.log, ...opts });
  h.onChange((c) => changes.push(c));
  checkers.push(h);
  return { h, changes, lines: sink.lines };
}

afterEach(async () => {
  await Promise.all(checkers.splice(0).map((c) => c.close()));
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((r) => s.close(() => r()))));
});

describe('health checker, active checks over real sockets', () => {
  it('starts new brokers healthy and keeps a 2xx broker healthy', async () => {
    const ok = await broker(200);
    const { h, changes } = checker();
    h.track([ok.url]);
    expect(h.isHealthy(ok.url)).toBe(true);
    h.start();
    await vi.waitFor(() => expect(ok.hits).toBeGreaterThanOrEqual(4), { timeout: 3000 });
    expect(h.isHealthy(ok.url)).toBe(true);
    expect(changes).toEqual([]);
  });

  it('marks a 500 broker down after downAfter checks, with a warn log line', async () => {
    const bad = await broker(500);
    const { h, changes, lines } = checker({ downAfter: 3 });
    // Probes of one broker never overlap, so at the change no other probe is on the wire.
    let hitsAtDown = 0;
    h.onChange(() => (hitsAtDown = bad.hits));
    h.track([bad.url]);
    h.start();
    await vi.waitFor(() => expect(h.isHealthy(bad.url)).toBe(false), { timeout: 3000 });
    expect(hitsAtDown).toBe(3);
    expect(changes).toHaveLength(1);
    expect(changes[0]).toMatchObject({ url: bad.url, healthy: false });
    expect(h.lastChange(bad.url)).toBe(changes[0]);
    const line = lines.find((l) => l.msg === 'broker down')!;
    expect(line).toMatchObject({ level: 40, url: bad.url });
    expect(line.reason).toBe('3 consecutive failures, last: health check failed: 500 on GET /health');
  });

  it('marks a closed port down by active checks too', async () => {
    const url = await closedUrl();
    const { h, changes } = checker();
    h.track([url]);
    h.start();
    await vi.waitFor(() => expect(h.isHealthy(url)).toBe(false), { timeout: 3000 });
    expect(changes).toMatchObject([{ url, healthy: false, reason: '2 consecutive failures, last: health check failed: connection refused' }]);
  });

  it('brings a broker back after upAfter consecutive successes, with an info log line', async () => {
    const b = await broker(500);
    const { h, changes, lines } = checker({ downAfter: 2, upAfter: 3 });
    const hitsAt: number[] = [];
    h.onChange((c) => {
      hitsAt.push(b.hits);
      // Heal the broker as soon as it is declared down; no probe is in flight at this moment.
      if (!c.healthy) b.status = 200;
    });
    h.track([b.url]);
    h.start();
    await vi.waitFor(() => expect(h.isHealthy(b.url)).toBe(false), { timeout: 3000 });
    await vi.waitFor(() => expect(h.isHealthy(b.url)).toBe(true), { timeout: 3000 });
    expect(hitsAt).toEqual([2, 5]);
    expect(changes.map((c) => c.healthy)).toEqual([false, true]);
    expect(lines.find((l) => l.msg === 'broker up')).toMatchObject({ level: 30, url: b.url });
  });

  it('never overlaps probes of one broker when a probe outlasts the interval', async () => {
    const slow = await broker(200, 200);
    const { h } = checker({ intervalMs: 20, timeoutMs: 1000 });
    h.track([slow.url]);
    h.start();
    await vi.waitFor(() => expect(slow.hits).toBeGreaterThanOrEqual(3), { timeout: 5000 });
    expect(slow.maxConcurrent).toBe(1);
    expect(h.isHealthy(slow.url)).toBe(true);
  });

  it('counts a probe that times out as a failure', async () => {
    const hung = await broker(200, 2000);
    const { h } = checker({ intervalMs: 30, timeoutMs: 50, downAfter: 2 });
    h.track([hung.url]);
    h.start();
    await vi.waitFor(() => expect(h.isHealthy(hung.url)).toBe(false), { timeout: 3000 });
    expect(h.lastChange(hung.url)?.reason).toBe('2 consecutive failures, last: health check failed: timeout (50 ms)');
  });

  it('stops checking an untracked broker, and after close()', async () => {
    const a = await broker(200);
    const b = await broker(200);
    const { h } = checker();
    h.track([a.url, b.url]);
    h.start();
    await vi.waitFor(() => expect(b.hits).toBeGreaterThanOrEqual(1), { timeout: 3000 });
    h.untrack(b.url);
    // A probe of b already on the wire may still land; after two more rounds of a, none can.
    let target = a.hits + 2;
    await vi.waitFor(() => expect(a.hits).toBeGreaterThanOrEqual(target), { timeout: 3000 });
    const bHits = b.hits;
    target = a.hits + 3;
    await vi.waitFor(() => expect(a.hits).toBeGreaterThanOrEqual(target), { timeout: 3000 });
    expect(b.hits).toBe(bHits);
    // A second checker on the same interval is the clock: three of its rounds give a closed one time to misbehave.
    const c = await broker(200);
    const { h: reference } = checker();
    reference.track([c.url]);
    reference.start();
    await h.close();
    const aHits = a.hits;
    target = c.hits + 3;
    await vi.waitFor(() => expect(c.hits).toBeGreaterThanOrEqual(target), { timeout: 3000 });
    expect(a.hits).toBe(aHits);
  });
});

describe('health checker, passive signals', () => {
  it('marks a broker down at once on a connect failure', () => {
    const { h, changes, lines } = checker();
    h.track(['http://b1', 'http://b2']);
    h.reportFailure('http://b1', 'connect');
    expect(h.isHealthy('http://b1')).toBe(false);
    expect(h.isHealthy('http://b2')).toBe(true);
    expect(changes.map((c) => [c.url, c.healthy, c.reason])).toEqual([['http://b1', false, 'connect failure']]);
    expect(lines.filter((l) => l.msg === 'broker down').map((l) => l.url)).toEqual(['http://b1']);
  });

  it('a reset, 5xx or timeout only starts a check: one at a time, none within a quarter interval of the last, and a passing one changes nothing', async () => {
    let now = 0;
    const probed: string[] = [];
    const { h, changes } = checker({
      intervalMs: 400,
      clock: () => now,
      probe: async (url) => {
        probed.push(url);
        return true;
      },
    });
    h.track(['http://b1']);
    for (let i = 0; i < 10; i++) for (const kind of ['reset', 'status5xx', 'timeout'] as const) h.reportFailure('http://b1', kind);
    expect(probed).toEqual(['http://b1']);
    await checksDone();
    now = 99;
    h.reportFailure('http://b1', 'timeout');
    expect(probed).toHaveLength(1);
    now = 100;
    h.reportFailure('http://b1', 'timeout');
    expect(probed).toHaveLength(2);
    await checksDone();
    expect(h.isHealthy('http://b1')).toBe(true);
    expect(changes).toEqual([]);
  });

  it('counts the failed checks that suspicions start toward downAfter; a success in between restarts the count', async () => {
    let now = 0;
    const { h } = checker({ downAfter: 2, clock: () => now, probe: async () => 'timeout (500 ms)' });
    h.track(['http://b1']);
    const suspect = async (kind: 'reset' | 'status5xx' | 'timeout') => {
      now += 500;
      h.reportFailure('http://b1', kind);
      await checksDone();
    };
    await suspect('timeout');
    h.reportSuccess('http://b1');
    await suspect('status5xx');
    expect(h.isHealthy('http://b1')).toBe(true);
    await suspect('reset');
    expect(h.isHealthy('http://b1')).toBe(false);
    expect(h.lastChange('http://b1')?.reason).toBe('2 consecutive failures, last: health check after a connection reset failed: timeout (500 ms)');
  });

  it('does not bring a down broker back on passive successes alone', () => {
    const { h } = checker({ upAfter: 1 });
    h.track(['http://b1']);
    h.reportFailure('http://b1', 'connect');
    for (let i = 0; i < 5; i++) h.reportSuccess('http://b1');
    expect(h.isHealthy('http://b1')).toBe(false);
  });

  it('treats untracked brokers as healthy and ignores reports about them', () => {
    const { h, changes } = checker();
    h.reportFailure('http://nobody', 'connect');
    expect(h.isHealthy('http://nobody')).toBe(true);
    expect(changes).toEqual([]);
  });

  it('recovers a passively downed broker through active checks on a real socket', async () => {
    const ok = await broker(200);
    const { h, changes } = checker({ upAfter: 2 });
    h.track([ok.url]);
    h.reportFailure(ok.url, 'connect');
    expect(h.isHealthy(ok.url)).toBe(false);
    h.start();
    await vi.waitFor(() => expect(h.isHealthy(ok.url)).toBe(true), { timeout: 3000 });
    expect(changes.map((c) => c.healthy)).toEqual([false, true]);
  });

  it('stops notifying a listener after it unsubscribes', () => {
    const { h } = checker();
    const seen: boolean[] = [];
    const off = h.onChange((c) => seen.push(c.healthy));
    h.track(['http://b1', 'http://b2']);
    h.reportFailure('http://b1', 'connect');
    off();
    h.reportFailure('http://b2', 'connect');
    expect(seen).toEqual([false]);
  });
});

describe('createHttpProbe', () => {
  it('is true on 2xx and says why not on 5xx, 404 and refused connections', async () => {
    const ok = await broker(204);
    const bad = await broker(503);
    const p = createHttpProbe(500);
    try {
      expect(await p.probe(ok.url, 500)).toBe(true);
      expect(await p.probe(bad.url, 500)).toBe('503 on GET /health');
      expect(await p.probe(await closedUrl(), 500)).toBe('connection refused');
      // Only /health is probed: the base URL has no trailing slash (Tenant.brokers).
      expect(ok.hits).toBe(1);
    } finally {
      await p.close();
    }
  });
});
