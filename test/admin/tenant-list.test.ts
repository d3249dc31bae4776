/**
 * GET /admin/v1/tenants for many tenants: pages by cursor and limit, filters by status, plan and
 * id or host prefix, no page over 256 KiB; /admin/v1/usage and /admin/v1/brokers page the same
 * way, a brokers page reading only its own tenants; the usage export leaves out all-zero rows on
 * request.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { DEFAULT_PAGE, MAX_PAGE, PAGE_MAX_BYTES, SortedTenantIds, listQuery, tenantPage } from '../../src/admin/tenant-list.js';
import { EdgeError } from '../../src/errors.js';
import type { Tenant } from '../../src/tenants/model.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, TEST_PLAN, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { manyTenantId, manyTenants } from '../helpers/many-tenants.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, runCli, usageSettled } from './admin-call.js';

const fake = (id: string, over: Partial<{ status: string; plan: string; hosts: string[] }> = {}): Tenant =>
  ({ id, status: over.status ?? 'active', plan: { id: over.plan ?? 'test' }, hosts: over.hosts ?? [] }) as unknown as Tenant;

describe('listQuery and tenantPage', () => {
  it('refuses a bad limit, status or cursor', () => {
    for (const q of ['limit=0', `limit=${MAX_PAGE + 1}`, 'limit=x', 'status=gone', 'cursor=%25%25']) {
      expect(listQuery(new URLSearchParams(q))).toBeInstanceOf(EdgeError);
    }
    expect(listQuery(new URLSearchParams(''))).toMatchObject({ limit: DEFAULT_PAGE, after: null, status: null, plan: null, prefix: null });
  });

  it('pages after the cursor, filters, and cuts a page short before 256 KiB', () => {
    const tenants = new Map(['a', 'b', 'c', 'd', 'e'].map((id, i) => [id, fake(id, { status: i % 2 ? 'suspended' : 'active', hosts: [`${id}.example.com`] })]));
    const ids = [...tenants.keys()];
    const byId = (id: string) => tenants.get(id);
    const page = (qs: string) => tenantPage(ids, byId, listQuery(new URLSearchParams(qs)) as never, (t) => t.id);
    const first = page('limit=2');
    expect(first.tenants).toEqual(['a', 'b']);
    expect(page(`limit=2&cursor=${first.next}`)).toMatchObject({ tenants: ['c', 'd'] });
    expect(page('status=suspended')).toEqual({ tenants: ['b', 'd'], next: null });
    expect(page('prefix=c.EXAMPLE')).toEqual({ tenants: ['c'], next: null });
    // Views of 100 KiB each: two fit a page, the third starts the next one.
    const big = tenantPage(ids, byId, listQuery(new URLSearchParams('limit=5')) as never, (t) => ({ id: t.id, pad: 'x'.repeat(100 * 1024) }));
    expect(big.tenants.map((t) => t.id)).toEqual(['a', 'b']);
    expect(Buffer.byteLength(JSON.stringify(big))).toBeLessThanOrEqual(PAGE_MAX_BYTES);
  });
});

describe('SortedTenantIds', () => {
  it('sorts the directory once per generation', () => {
    const ids = new SortedTenantIds();
    let reads = 0;
    const dir = (list: string[]) => () => {
      reads++;
      return list.map((id) => fake(id));
    };
    expect(ids.of(1, dir(['b', 'a']))).toEqual(['a', 'b']);
    expect(ids.of(1, dir(['c']))).toEqual(['a', 'b']);
    expect(ids.of(2, dir(['c', 'a']))).toEqual(['a', 'c']);
    expect(reads).toBe(2);
  });
});

describe('listing 3,000 tenants through the admin listener', () => {
  const N = 3000;
  let broker: BrokerDouble;
  let h: EdgeHarness;

  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    h = await startEdge(
      testConfig([broker.url], {
        server: { admin: { token: ADMIN_TOKEN } },
        plans: { pro: TEST_PLAN },
        tenants: manyTenants(N, [broker.url], { proPlan: 'pro' }),
      }),
      { usageFlushMs: 50 },
    );
  });

  afterAll(async () => {
    await h?.close();
    await broker?.close();
  });

  it('pages through every tenant once, in id order, each page under 256 KiB', async () => {
    const seen: string[] = [];
    let cursor = '';
    let pages = 0;
    do {
      const res = await admin(h, 'GET', `/admin/v1/tenants?limit=${MAX_PAGE}&cursor=${cursor}`);
      expect(res.status).toBe(200);
      expect(Buffer.byteLength(res.text)).toBeLessThanOrEqual(PAGE_MAX_BYTES);
      expect(res.json.total).toBe(N + 1);
      seen.push(...res.json.tenants.map((t: { id: string }) => t.id));
      cursor = res.json.next ?? '';
      pages++;
    } while (cursor !== '');
    expect(seen).toEqual(['acme', ...Array.from({ length: N }, (_, i) => manyTenantId(i))].sort());
    expect(pages).toBeGreaterThanOrEqual(3);
    // Without a limit: the default page, and a cursor to go on.
    const first = await admin(h, 'GET', '/admin/v1/tenants');
    expect(first.json.tenants).toHaveLength(DEFAULT_PAGE);
    expect(first.json.next).toEqual(expect.any(String));
  });

  it('filters by status, plan and id or host prefix, and refuses bad parameters', async () => {
    const res = await admin(h, 'GET', '/admin/v1/tenants?status=suspended&plan=pro&prefix=t001');
    const expected = Array.from({ length: N }, (_, i) => i).filter((i) => i >= 1000 && i < 2000 && i % 10 === 9 && i % 3 === 0);
    expect(res.json.tenants.map((t: { id: string }) => t.id)).toEqual(expected.map(manyTenantId));
    expect(res.json.tenants.every((t: { status: string; plan: string }) => t.status === 'suspended' && t.plan === 'pro')).toBe(true);
    const byHost = await admin(h, 'GET', `/admin/v1/tenants?prefix=${manyTenantId(2345)}.LOCAL`);
    expect(byHost.json.tenants.map((t: { id: string }) => t.id)).toEqual([manyTenantId(2345)]);
    expect((await admin(h, 'GET', '/admin/v1/tenants?limit=100000')).json.code).toBe('invalid_request');
    expect((await admin(h, 'GET', '/admin/v1/tenants?status=deleted')).status).toBe(400);
  });

  it('the CLI pages and searches: tenants list --status --plan --prefix --limit, and --all follows the cursors', async () => {
    const one = await runCli(h, 'tenants', 'list', '--prefix', 't00001', '--limit', '4', '--json');
    expect(one.code).toBe(0);
    const doc = JSON.parse(one.out);
    expect(doc.tenants.map((t: { id: string }) => t.id)).toEqual([10, 11, 12, 13].map(manyTenantId));
    const next = await runCli(h, 'tenants', 'list', '--prefix', 't00001', '--limit', '4', '--cursor', doc.next);
    expect(next.out).toContain(manyTenantId(14));
    expect(next.out).toContain('--cursor');
    const all = await runCli(h, 'tenants', 'list', '--all', '--status', 'suspended', '--json');
    expect(JSON.parse(all.out).tenants).toHaveLength(N / 10);
  });

  it('GET /admin/v1/brokers pages as the tenant list does: every tenant once, in id order, each page under 256 KiB', async () => {
    const seen: string[] = [];
    let cursor = '';
    do {
      const res = await admin(h, 'GET', `/admin/v1/brokers?limit=${MAX_PAGE}&cursor=${cursor}`);
      expect(res.status).toBe(200);
      expect(Buffer.byteLength(res.text)).toBeLessThanOrEqual(PAGE_MAX_BYTES);
      expect(res.json.total).toBe(N + 1);
      seen.push(...res.json.clusters.map((c: { tenant: string }) => c.tenant));
      cursor = res.json.next ?? '';
    } while (cursor !== '');
    expect(seen).toEqual(['acme', ...Array.from({ length: N }, (_, i) => manyTenantId(i))].sort());
    const first = await admin(h, 'GET', '/admin/v1/brokers');
    expect(first.json.clusters).toHaveLength(DEFAULT_PAGE);
    expect(first.json.clusters[0]).toMatchObject({ tenant: 'acme', brokers: [expect.objectContaining({ url: broker.url, keyShare: 1 })] });
    expect(first.json.next).toEqual(expect.any(String));
    const filtered = await admin(h, 'GET', '/admin/v1/brokers?status=suspended&prefix=t00001');
    expect(filtered.json.clusters.map((c: { tenant: string }) => c.tenant)).toEqual([19].map(manyTenantId));
  });

  it('a brokers page reads only its own tenants from the directory, never all of them; tenant=ID gives one', async () => {
    const after = (await admin(h, 'GET', '/admin/v1/brokers?limit=3')).json.next;
    const all = vi.spyOn(h.app.tenants, 'all');
    const byId = vi.spyOn(h.app.tenants, 'byId');
    try {
      const page = await admin(h, 'GET', `/admin/v1/brokers?limit=10&cursor=${after}`);
      expect(page.json.clusters.map((c: { tenant: string }) => c.tenant)).toEqual([2, 3, 4, 5, 6, 7, 8, 9, 10, 11].map(manyTenantId));
      const one = await admin(h, 'GET', `/admin/v1/brokers?tenant=${manyTenantId(2345)}`);
      expect(one.json).toEqual({ clusters: [expect.objectContaining({ tenant: manyTenantId(2345) })], next: null });
      expect(all).not.toHaveBeenCalled();
      expect(byId).toHaveBeenCalledTimes(11);
    } finally {
      all.mockRestore();
      byId.mockRestore();
    }
    expect((await admin(h, 'GET', '/admin/v1/brokers?tenant=nobody')).status).toBe(404);
    expect((await admin(h, 'GET', '/admin/v1/brokers?tenant=acme&limit=5')).json.code).toBe('invalid_request');
    expect((await admin(h, 'GET', '/admin/v1/brokers?limit=0')).json.code).toBe('invalid_request');
  });

  it('the CLI brokers command pages as tenants list does, or shows one tenant', async () => {
    const one = await runCli(h, 'brokers', '--prefix', 't00001', '--limit', '4', '--json');
    expect(one.code).toBe(0);
    const doc = JSON.parse(one.out);
    expect(doc.clusters.map((c: { tenant: string }) => c.tenant)).toEqual([10, 11, 12, 13].map(manyTenantId));
    const next = await runCli(h, 'brokers', '--prefix', 't00001', '--limit', '4', '--cursor', doc.next);
    expect(next.out).toMatch(new RegExp(`^${manyTenantId(14)}\\s`, 'm'));
    expect(next.out).toContain('more: --cursor');
    const all = await runCli(h, 'brokers', '--all', '--status', 'suspended', '--json');
    expect(JSON.parse(all.out).clusters).toHaveLength(N / 10);
    const named = await runCli(h, 'brokers', '--tenant', manyTenantId(42));
    expect(named.out.trim().split('\n').slice(1)).toEqual([
      expect.stringMatching(new RegExp(`^${manyTenantId(42)}\\s+${broker.url.replace(/[.]/g, '\\.')}\\s`)),
    ]);
    expect((await runCli(h, 'brokers', '--tenant', 'acme', '--limit', '3')).code).toBe(2);
  });

  it('GET /admin/v1/usage gives a page of tenants with its cursor; the export leaves out all-zero rows with zeros=omit', async () => {
    const id = manyTenantId(1234);
    expect((await call(h, 'GET', '/api/v1/kv/x', { token: await token({ roles: ['read-write'], tenant: id }), host: `${id}.localhost` })).status).toBe(403);
    await waitFor(() => usageSettled(h), 5000, 'usage flushed');
    const usage = await admin(h, 'GET', `/admin/v1/usage?prefix=t00123&limit=5`);
    expect(usage.json.tenants.map((t: { tenant: string }) => t.tenant)).toEqual([1230, 1231, 1232, 1233, 1234].map(manyTenantId));
    expect(usage.json.tenants[4].total.requests).toBe(1);
    expect(usage.json.next).toEqual(expect.any(String));

    const omitted = await admin(h, 'GET', '/admin/v1/usage/export?zeros=omit&format=jsonl');
    expect(omitted.status).toBe(200);
    expect(
      omitted.text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).tenant),
    ).toEqual([id]);
    const all = await admin(h, 'GET', `/admin/v1/usage/export?format=jsonl&granularity=day&from=${new Date().toISOString().slice(0, 10)}T00:00:00Z`);
    expect(all.text.trim().split('\n').length).toBeGreaterThanOrEqual(N + 1);
    expect((await admin(h, 'GET', '/admin/v1/usage/export?zeros=maybe')).json.code).toBe('invalid_request');
  });
});
