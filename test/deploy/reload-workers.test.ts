/**
 * A reload with cluster workers and Redis reports what one process reports: every changed setting
 * is applied by every worker or named by its path as needing a restart, in the log, the admin API
 * and /metrics. Secrets (the admin token, the JWT secret) rotate without a restart; certificate
 * paths are swapped into the running listener; files replaced in place are served without a signal.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { fingerprint, makeCa, makeServerCert, replaceFile, writePem } from '../helpers/certs.js';
import { TEST_PLAN, TEST_SECRET, token } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { connectionRefused, edgeTracker, freePort, freshRequest, type EdgeProcess } from './edge-process.js';

const edges = edgeTracker();
const dirs: string[] = [];
const prefixes: string[] = [];
afterEach(async () => {
  await edges.cleanup();
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
  const redis = await connectTest(SHARED_REDIS_URL, 2000);
  for (const p of prefixes.splice(0)) await flushPrefix(redis, p);
  redis.disconnect();
});

const OLD_TOKEN = 'admin-token-before-the-rotation-0001';
const NEW_TOKEN = 'admin-token-after-the-rotation-00002';
const NEW_SECRET = 'jwt-secret-after-the-rotation-0123456789';

interface Settings {
  port: number;
  adminPort: number;
  prefix: string;
  adminToken: string;
  secret: string;
  cert?: { cert: string; key: string };
}

function config(s: Settings) {
  return {
    server: {
      workers: 2,
      https: { host: '127.0.0.1', port: s.port, ...(s.cert ?? {}) },
      admin: { host: '127.0.0.1', port: s.adminPort, token: s.adminToken },
    },
    log: { level: 'info' },
    redis: { url: SHARED_REDIS_URL, keyPrefix: s.prefix },
    auth: { secret: s.secret },
    plans: { test: TEST_PLAN },
    tenants: { acme: { plan: 'test', hosts: ['acme.localhost'], brokers: ['http://127.0.0.1:9'] } },
  };
}

/** The admin API's answer status with `adminToken`, on a connection of its own (the next worker). */
async function adminStatus(adminPort: number, adminToken: string): Promise<number> {
  return (await freshRequest(`http://127.0.0.1:${adminPort}/admin/v1/tenants`, { headers: { authorization: `Bearer ${adminToken}` } })).status;
}

/** The certificate the HTTPS listener serves on a fresh connection (the next worker's). */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', rejectUnauthorized: false }, () => {
      resolve(socket.getPeerX509Certificate()!.fingerprint256);
      socket.destroy();
    });
    socket.once('error', reject);
  });
}

/** Every worker's line matching `msg` after `from` log lines, one per worker (by cluster worker id). */
async function bothWorkers(edge: EdgeProcess, from: number, msg: (m: string) => boolean, ids: readonly number[] = [1, 2]): Promise<Record<string, unknown>[]> {
  return Promise.all(ids.map((worker) => edge.waitForLog((l) => edge.lines.indexOf(l) >= from && l.worker === worker && msg(String(l.msg)), 20_000)));
}

// Starts the CLI with two workers under tsx: seconds alone, tens of seconds on a loaded machine.
// The timeout covers the sum of the bounded waits below (start 40 s, each reload 20 s, each
// reconnect 15 s): a run of about 6 s alone timed out at 60 s in a loaded CI run.
describe('SIGHUP with cluster workers and Redis', { timeout: 180_000 }, () => {
  it('rotates the admin token and the JWT secret, reports the moved HTTPS port as needing a restart, swaps in certificate files, and serves files replaced in place', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-reload-workers-'));
    dirs.push(dir);
    const prefix = uniquePrefix();
    prefixes.push(prefix);
    const [port, movedPort, adminPort] = [await freePort(), await freePort(), await freePort()];
    const file = join(dir, 'edge.yaml');
    const base: Settings = { port, adminPort, prefix, adminToken: OLD_TOKEN, secret: TEST_SECRET };
    await writeFile(file, stringify(config(base)));
    const edge = await edges.start({}, ['--config', file]);
    await edge.waitForLog((l) => l.msg === 'all workers listening', 40_000);
    const push = async (secret: string) =>
      (
        await freshRequest(`https://127.0.0.1:${port}/api/v1/push`, {
          method: 'POST',
          headers: {
            host: 'acme.localhost',
            'content-type': 'application/json',
            authorization: `Bearer ${await token({ roles: ['read-write'], tenant: 'acme' }, secret)}`,
          },
          body: JSON.stringify({ items: [{ queue: 'q', payload: 1 }] }),
        })
      ).status;
    expect([await adminStatus(adminPort, OLD_TOKEN), await adminStatus(adminPort, OLD_TOKEN)]).toEqual([200, 200]);

    // 1. New admin token, new JWT secret, another HTTPS port.
    const rotated: Settings = { ...base, port: movedPort, adminToken: NEW_TOKEN, secret: NEW_SECRET };
    await writeFile(file, stringify(config(rotated)));
    let from = edge.lines.length;
    edge.child.kill('SIGHUP');
    const restartLines = await bothWorkers(edge, from, (m) => m.startsWith('configuration reload: these settings changed'));
    for (const l of restartLines) expect(l.settings).toEqual(['server.https.port']);
    const applied = await bothWorkers(edge, from, (m) => m.startsWith('configuration reloaded'));
    for (const l of applied) expect(l.settings).toEqual(['server.admin.token', 'auth.secret']);
    // Fresh connections reach both workers: the old token is refused by each, the new one accepted.
    expect([await adminStatus(adminPort, OLD_TOKEN), await adminStatus(adminPort, OLD_TOKEN)]).toEqual([401, 401]);
    expect([await adminStatus(adminPort, NEW_TOKEN), await adminStatus(adminPort, NEW_TOKEN)]).toEqual([200, 200]);
    // Tokens signed with the old secret are refused by both workers; the new secret's pass authentication (the broker is unreachable).
    expect([await push(TEST_SECRET), await push(TEST_SECRET)]).toEqual([401, 401]);
    for (const status of [await push(NEW_SECRET), await push(NEW_SECRET)]) expect(status).not.toBe(401);
    // The port did not move, and every worker says so: admin API and /metrics.
    expect(await connectionRefused(movedPort)).toBe(true);
    for (let i = 0; i < 2; i++) {
      const report = JSON.parse(
        (await freshRequest(`http://127.0.0.1:${adminPort}/admin/v1/reloads`, { headers: { authorization: `Bearer ${NEW_TOKEN}` } })).text,
      );
      expect(report).toMatchObject({
        last: { result: 'applied', appliedSettings: ['server.admin.token', 'auth.secret'], restartNeeded: ['server.https.port'] },
        restartNeeded: ['server.https.port'],
        applied: 1,
      });
    }
    const metrics = (await freshRequest(`http://127.0.0.1:${adminPort}/metrics`)).text;
    expect(metrics).toMatch(/^queen_edge_config_restart_needed\{setting="server\.https\.port"\} 1$/m);

    // A certificate file that is not there: the primary refuses the file, naming it, and no worker tries it.
    from = edge.lines.length;
    await writeFile(file, stringify(config({ ...rotated, cert: { cert: join(dir, 'missing.crt'), key: join(dir, 'missing.key') } })));
    edge.child.kill('SIGHUP');
    const refused = await edge.waitForLog(
      (l) => edge.lines.indexOf(l) >= from && l.worker === undefined && l.msg === 'configuration reload refused: keeping the running configuration',
      20_000,
    );
    expect(refused.problems).toEqual([`server.https.cert: ${dir}/missing.crt: no such file`, `server.https.key: ${dir}/missing.key: no such file`]);

    // 2. From the generated certificate to certificate files: applied by every worker.
    const ca = await makeCa();
    const first = await makeServerCert(ca, ['localhost', '127.0.0.1']);
    const files = await writePem(dir, 'edge', first);
    await writeFile(file, stringify(config({ ...rotated, cert: files })));
    from = edge.lines.length;
    edge.child.kill('SIGHUP');
    for (const l of await bothWorkers(edge, from, (m) => m.startsWith('configuration reloaded'))) {
      expect(l.settings).toEqual(['server.https.cert', 'server.https.key']);
    }
    expect([await servedFingerprint(port), await servedFingerprint(port)]).toEqual([fingerprint(first.cert), fingerprint(first.cert)]);

    // 3. The files replaced in place (as cert-manager does): served by every worker, no signal.
    const second = await makeServerCert(ca, ['localhost', '127.0.0.1']);
    from = edge.lines.length;
    await replaceFile(files.key, second.key);
    await replaceFile(files.cert, second.cert);
    await bothWorkers(edge, from, (m) => m === 'TLS certificates reloaded');
    expect([await servedFingerprint(port), await servedFingerprint(port)]).toEqual([fingerprint(second.cert), fingerprint(second.cert)]);
  });

  it('rotates the Redis password: every connection of every worker reconnects with the new one; credentials Redis refuses are refused', async ({
    onTestFailed,
  }) => {
    const admin = await connectTest(SHARED_REDIS_URL, 2000);
    const prefix = uniquePrefix();
    prefixes.push(prefix);
    // A user of its own on the shared Redis: its passwords change, nobody else's.
    const user = `qe-rotate-${prefix.replace(/\W/g, '')}`;
    await admin.call('ACL', 'SETUSER', user, 'on', '>first-password-0123', '~*', '&*', '+@all');
    // A failure (a timeout too) reports how far the test got and what the edge said last.
    const t0 = Date.now();
    const steps: string[] = [];
    const note = (what: string) => steps.push(`${Date.now() - t0} ms: ${what}`);
    let edgeLines: () => unknown[] = () => [];
    onTestFailed(() => console.error(`steps: ${steps.join('; ')}\nlast edge lines: ${JSON.stringify(edgeLines())}`));
    const connections = async () =>
      String(await admin.call('CLIENT', 'LIST'))
        .split('\n')
        .filter((l) => l.includes(`user=${user}`)).length;
    try {
      const dir = await mkdtemp(join(tmpdir(), 'qe-reload-workers-'));
      dirs.push(dir);
      const [port, adminPort] = [await freePort(), await freePort()];
      const file = join(dir, 'edge.yaml');
      const withPassword = (password: string) => {
        const c = config({ port, adminPort, prefix, adminToken: OLD_TOKEN, secret: TEST_SECRET });
        return { ...c, redis: { ...c.redis, url: `redis://${user}:${password}@127.0.0.1:6379` } };
      };
      await writeFile(file, stringify(withPassword('first-password-0123')));
      const edge = await edges.start({}, ['--config', file]);
      edgeLines = () => edge.lines.slice(-20);
      await edge.waitForLog((l) => l.msg === 'all workers listening', 40_000);
      note('listening');
      /** A write to the directory in Redis through the next worker. */
      const write = async () =>
        (
          await freshRequest(`http://127.0.0.1:${adminPort}/admin/v1/tenants/acme/resume`, {
            method: 'POST',
            headers: { authorization: `Bearer ${OLD_TOKEN}` },
          })
        ).status;
      expect([await write(), await write()]).toEqual([200, 200]);
      note('first writes');

      // Credentials Redis refuses: every worker refuses the reload and keeps its own.
      await writeFile(file, stringify(withPassword('not-the-password-0123')));
      let from = edge.lines.length;
      edge.child.kill('SIGHUP');
      for (const l of await bothWorkers(edge, from, (m) => m === 'configuration reload refused: keeping the running configuration')) {
        expect(l.problems).toEqual([expect.stringMatching(/^redis\.url: Redis refuses the new credentials: WRONGPASS/)]);
      }
      note('bad credentials refused');

      // A worker replaced now starts with what the workers run, not with the credentials they refused.
      const first = await edge.waitForLog((l) => l.msg === 'worker listening');
      const victim = Number(first.workerPid);
      from = edge.lines.length;
      process.kill(victim, 'SIGKILL');
      const replacement = await edge.waitForLog((l) => edge.lines.indexOf(l) >= from && l.msg === 'worker listening' && l.workerPid !== victim, 40_000);
      const ids = [1, 2].map((id) => (id === first.worker ? Number(replacement.worker) : id));
      expect([await write(), await write()]).toEqual([200, 200]);
      note('a worker replaced');

      // Redis accepts both passwords; the edge reloads the new one; then the old one is removed and every connection dropped.
      await admin.call('ACL', 'SETUSER', user, '>second-password-0123');
      await writeFile(file, stringify(withPassword('second-password-0123')));
      from = edge.lines.length;
      edge.child.kill('SIGHUP');
      for (const l of await bothWorkers(edge, from, (m) => m.startsWith('configuration reloaded'), ids)) expect(l.settings).toEqual(['redis.url']);
      const before = await connections();
      note(`reloaded; ${before} connections`);
      await admin.call('ACL', 'SETUSER', user, '<first-password-0123');
      await admin.call('CLIENT', 'KILL', 'USER', user);
      note('killed');
      // Every connection (limiter, usage store, subscriber, of both workers) is back, with the new password.
      await waitFor(async () => (await connections()) >= before, 15_000, `${before} connections of ${user} again`);
      note(`reconnected: ${await connections()}`);
      await waitFor(async () => (await write()) === 200 && (await write()) === 200, 15_000, 'directory writes through both workers');
      note('written');
      // No other worker died on the way (a crashed worker is replaced, and its handed-over request hangs).
      expect(edge.lines.filter((l) => l.msg === 'worker died: replacing it' && l.workerPid !== victim)).toEqual([]);
    } finally {
      await admin.call('ACL', 'DELUSER', user);
      admin.disconnect();
    }
  });
});
