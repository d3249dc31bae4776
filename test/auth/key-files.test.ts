/**
 * Key files read safely, through real processes and sockets: `validate` and the start refuse a
 * FIFO, a device or an oversized file named as a public key at once (they blocked for good, or
 * grew the process, reading it synchronously), and an admin record naming a file is a 400 that
 * opens nothing, so the instance keeps answering.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { edgeTracker, freePort, type EdgeProcess } from '../deploy/edge-process.js';
import { TEST_PLAN, TEST_SECRET } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { keyPair } from '../helpers/tokens.js';

const ADMIN = 'admin-token-for-tests-0123456789';
const edges = edgeTracker();
afterEach(() => edges.cleanup());

let dir: string;
let fifo: string;
let large: string;
let pem: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'qe-keyfiles-'));
  fifo = join(dir, 'key.fifo');
  execFileSync('mkfifo', [fifo]);
  large = join(dir, 'large.pem');
  await writeFile(large, Buffer.alloc(100 * 1024, 'A'));
  pem = (await keyPair('ES256')).spkiPem;
});
afterAll(() => rm(dir, { recursive: true, force: true }));

const base = (tenants: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  log: { level: 'info' },
  auth: { secret: TEST_SECRET },
  plans: { test: TEST_PLAN },
  tenants,
  ...extra,
});
const withKey = (id: string, publicKey: string, n: number) => ({ [id]: { plan: 'test', brokers: [`http://127.0.0.1:${n}`], auth: { publicKey } } });

// Each test starts the CLI under tsx: seconds on a loaded machine.
describe('key files', { timeout: 60_000 }, () => {
  it('validate refuses a FIFO, a device and an oversized file by path, at once, exit 2', async () => {
    const edge = await edges.start(base({ ...withKey('fifo', fifo, 1), ...withKey('device', '/dev/zero', 2), ...withKey('large', large, 3) }), [
      'validate',
      '--config',
      '{config}',
    ]);
    expect((await edge.exited).code).toBe(2);
    const err = edge.stderr();
    expect(err).toContain(`tenants.fifo.auth.publicKey: ${fifo}: not a regular file`);
    expect(err).toContain('tenants.device.auth.publicKey: /dev/zero: not a regular file');
    expect(err).toContain(`tenants.large.auth.publicKey: ${large}: 102400 bytes, more than a key file holds (65536)`);
  });

  it('an admin record naming a FIFO is a 400 and the instance keeps answering; an inline key is accepted', async () => {
    const prefix = uniquePrefix();
    const redis = await connectTest(SHARED_REDIS_URL);
    const adminPort = await freePort();
    let edge: EdgeProcess | undefined;
    try {
      edge = await edges.start(
        base(
          { acme: { plan: 'test', brokers: ['http://127.0.0.1:1'] } },
          {
            server: { https: { host: '127.0.0.1', port: await freePort() }, admin: { host: '127.0.0.1', port: adminPort, token: ADMIN }, workers: 1 },
            redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
          },
        ),
      );
      await edge.waitForLog((l) => typeof l.msg === 'string' && /listening/.test(l.msg), 30_000);
      const put = (publicKey: string, id: string) =>
        request(`http://127.0.0.1:${adminPort}/admin/v1/tenants/${id}`, {
          method: 'PUT',
          headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ plan: 'test', brokers: [`http://127.0.0.1:${id.length + 10}`], auth: { publicKey } }),
          // A blocked instance never answers: give up long before the test's timeout.
          signal: AbortSignal.timeout(10_000),
        }).then(async (r) => ({ status: r.statusCode, json: (await r.body.json()) as { problems?: string[] } }));
      const refused = await put(fifo, 'piped');
      expect(refused.status).toBe(400);
      expect(refused.json.problems).toEqual([
        'auth.publicKey: a tenant record holds its key itself (PEM text, or a JWK as JSON); a file path is read only from the configuration file',
      ]);
      const live = await request(`http://127.0.0.1:${adminPort}/livez`, { signal: AbortSignal.timeout(10_000) });
      expect(live.statusCode).toBe(200);
      await live.body.dump();
      expect((await put(pem, 'inline')).status).toBe(200);
    } finally {
      await flushPrefix(redis, prefix);
      redis.disconnect();
    }
  });
});
