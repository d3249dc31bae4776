/**
 * A directory of thousands of tenants, through real sockets: admin PUTs of new tenants and a
 * reload changing one tenant are applied to that tenant alone, so a steady client is not stalled
 * while they happen (docs/tenancy.md, "Many tenants").
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfigFileOffThread } from '../../src/config/load.js';
import type { RawConfig } from '../../src/config/schema.js';
import { changesOf } from '../../src/config/tenant-ids.js';
import type { DirectoryChange } from '../../src/tenants/store.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { admin } from '../admin/admin-call.js';

const TENANTS = 4000;
const prefix = uniquePrefix();
let broker: BrokerDouble;
let edge: EdgeHarness;
let redis: Redis;
let base: RawConfig;

const many = (b: string): Record<string, unknown> => {
  const tenants: Record<string, unknown> = { acme: { tenancyAwareBrokers: true } };
  for (let i = 0; i < TENANTS; i++) tenants[`t${i}`] = { plan: 'test', hosts: [`t${i}.localhost`], brokers: [b], tenancyAwareBrokers: true };
  return tenants;
};

beforeAll(async () => {
  broker = await startBrokerDouble();
  redis = await connectTest(SHARED_REDIS_URL);
  base = testConfig([broker.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
    server: { admin: { token: 'admin-token-for-tests-0123456789' } },
    tenants: many(broker.url),
  });
  edge = await startEdge(base);
}, 20_000);

afterAll(async () => {
  await edge?.close();
  await broker?.close();
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

/** Pushes for acme back to back while `during` runs; the longest answer, and the same measured before it as a baseline. */
async function steadyWorst(during: () => Promise<void>): Promise<{ idle: number; busy: number }> {
  const tok = await token({ roles: ['read-write'], tenant: 'acme' });
  const push = async (): Promise<number> => {
    const started = performance.now();
    const r = await call(edge, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: 1 }] } });
    expect(r.status).toBe(201);
    return performance.now() - started;
  };
  let idle = 0;
  for (let i = 0; i < 20; i++) idle = Math.max(idle, await push());
  let busy = 0;
  let running = true;
  const loop = (async () => {
    while (running) busy = Math.max(busy, await push());
  })();
  try {
    await during();
  } finally {
    running = false;
    await loop;
  }
  return { idle, busy };
}

describe(`${TENANTS} tenants`, () => {
  it('admin PUTs of new tenants are each placed alone: the steady client is not stalled, each new tenant is served at once', async () => {
    const times: number[] = [];
    const { idle, busy } = await steadyWorst(async () => {
      for (let k = 0; k < 10; k++) {
        const started = performance.now();
        const put = await admin(edge, 'PUT', `/admin/v1/tenants/new${k}`, {
          body: { plan: 'test', hosts: [`new${k}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true },
        });
        times.push(performance.now() - started);
        expect(put.status).toBe(200);
        // The writer reads its own write: served at once.
        const served = await call(edge, 'POST', '/api/v1/push', {
          host: `new${k}.localhost`,
          token: await token({ roles: ['read-write'], tenant: `new${k}` }),
          body: { items: [{ queue: 'q', payload: 1 }] },
        });
        expect(served.status).toBe(201);
      }
    });
    // Each PUT used to rebuild the whole directory two or three times on the event loop (about
    // 0.3 s per PUT here, which every request waited for); now it places one tenant. Generous for
    // a busy 2-core machine: the steady client's own round trips vary by tens of milliseconds.
    expect(busy).toBeLessThan(Math.max(150, 3 * idle));
    expect(Math.max(...times)).toBeLessThan(Math.max(250, 5 * idle));
  });

  it('a reload changing one tenant places that tenant alone: the others keep their compiled objects', async () => {
    const changes: DirectoryChange[] = [];
    const off = edge.app.tenants.onChange((c) => changes.push(c));
    const t6 = edge.app.tenants.byId('t6');
    const next: RawConfig = { ...base, tenants: { ...base.tenants, t5: { ...base.tenants.t5!, status: 'suspended' } } };
    await edge.app.reload(next);
    off();
    expect(changes.map((c) => [...c.tenants])).toEqual([['t5']]);
    expect(edge.app.tenants.byId('t6')).toBe(t6);
    const pushFor = async (id: string) =>
      call(edge, 'POST', '/api/v1/push', {
        host: `${id}.localhost`,
        token: await token({ roles: ['read-write'], tenant: id }),
        body: { items: [{ queue: 'q', payload: 1 }] },
      });
    expect((await pushFor('t5')).json).toMatchObject({ code: 'cluster_suspended' });
    expect((await pushFor('t6')).status).toBe(201);
  });

  it('a file read again on the reader thread (SIGHUP) crosses to this thread as its changed tenant alone, which the reload places', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-many-'));
    try {
      const file = join(dir, 'edge.json');
      await writeFile(file, JSON.stringify(base));
      const first = await loadConfigFileOffThread(file);
      await edge.app.reload(first);
      await writeFile(file, JSON.stringify({ ...base, tenants: { ...base.tenants, t7: { ...base.tenants.t7!, status: 'suspended' } } }));
      const second = await loadConfigFileOffThread(file);
      // The others are the objects the first read built: nothing to copy or compare for them.
      expect(changesOf(second.tenants)?.changed).toEqual(['t7']);
      expect(second.tenants.t8).toBe(first.tenants.t8);

      const changes: DirectoryChange[] = [];
      const off = edge.app.tenants.onChange((c) => changes.push(c));
      const t8 = edge.app.tenants.byId('t8');
      await edge.app.reload(second);
      off();
      expect(changes.map((c) => [...c.tenants])).toEqual([['t7']]);
      expect(edge.app.tenants.byId('t7')?.status).toBe('suspended');
      expect(edge.app.tenants.byId('t8')).toBe(t8);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
