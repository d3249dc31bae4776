/**
 * A directory of thousands of tenants, through real sockets: admin PUTs of new tenants and a
 * reload changing one tenant are applied to that tenant alone, so a steady client is not stalled
 * while they happen (docs/tenancy.md, "Many tenants"; the stall itself is measured by
 * bench/many-tenants.ts).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
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

describe(`${TENANTS} tenants`, () => {
  it('admin PUTs of new tenants are each placed alone: one change naming it, the others keep their compiled objects, the directory is not walked, the new tenant is served at once', async () => {
    // Each PUT used to rebuild the whole directory two or three times on the event loop (about
    // 0.3 s per PUT here, which every request waited for). What it costs now is measured in
    // bench/many-tenants.ts; here, that it touches the one tenant.
    const t6 = edge.app.tenants.byId('t6');
    const all = vi.spyOn(edge.app.tenants, 'all');
    try {
      for (let k = 0; k < 10; k++) {
        const changes: DirectoryChange[] = [];
        const off = edge.app.tenants.onChange((c) => changes.push(c));
        const put = await admin(edge, 'PUT', `/admin/v1/tenants/new${k}`, {
          body: { plan: 'test', hosts: [`new${k}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true },
        });
        off();
        expect(put.status).toBe(200);
        expect(changes.map((c) => [...c.tenants])).toEqual([[`new${k}`]]);
        // The writer reads its own write: served at once.
        const served = await call(edge, 'POST', '/api/v1/push', {
          host: `new${k}.localhost`,
          token: await token({ roles: ['read-write'], tenant: `new${k}` }),
          body: { items: [{ queue: 'q', payload: 1 }] },
        });
        expect(served.status).toBe(201);
      }
      expect(all).not.toHaveBeenCalled();
    } finally {
      all.mockRestore();
    }
    expect(edge.app.tenants.byId('t6')).toBe(t6);
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
