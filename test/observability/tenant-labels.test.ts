import { createHmac } from 'node:crypto';
/** metrics.tenantLabels: which tenants have a label of their own, through the real /metrics. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OTHER_TENANT, TenantLabels, foldByLabel, tenantLabelSlots } from '../../src/observability/tenant-labels.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, TEST_SECRET, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { manyTenantId, manyTenants } from '../helpers/many-tenants.js';
import { ADMIN_TOKEN, admin, usageSettled } from '../admin/admin-call.js';
import { waitFor } from '../helpers/wait.js';

describe('TenantLabels', () => {
  it('gives the first N tenants a slot for good; later ones are _other, whatever their order', () => {
    const l = new TenantLabels(2, new Set(['-']));
    expect(['a', 'b', 'c', 'a', 'c', 'b', '-'].map((t) => l.label(t))).toEqual(['a', 'b', OTHER_TENANT, 'a', OTHER_TENANT, 'b', '-']);
  });

  it('reads all, none and first:N', () => {
    expect(tenantLabelSlots('all')).toBe(Number.POSITIVE_INFINITY);
    expect(tenantLabelSlots('none')).toBe(0);
    expect(tenantLabelSlots('first:100')).toBe(100);
    expect(new TenantLabels(tenantLabelSlots('none')).label('a')).toBe(OTHER_TENANT);
  });

  it('folds figures by label, summing the tenants past the slots', () => {
    const l = new TenantLabels(1);
    expect(
      foldByLabel(
        new Map([
          ['a', 1],
          ['b', 2],
          ['c', 4],
        ]),
        (id) => l.label(id),
        (v) => v,
      ),
    ).toEqual(
      new Map([
        ['a', 1],
        [OTHER_TENANT, 6],
      ]),
    );
  });
});

/** An HS256 token for `tenant`, signed with node:crypto: jose's async signing of 2,000 tokens would take seconds. */
function fastToken(tenant: string): string {
  const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const head = `${part({ alg: 'HS256' })}.${part({ sub: 'user-1', roles: ['read-write'], tenant, iat: now, exp: now + 600 })}`;
  return `${head}.${createHmac('sha256', TEST_SECRET).update(head).digest('base64url')}`;
}

/** Runs `fn` over `items`, `width` at a time. */
async function inBatches<T>(items: readonly T[], width: number, fn: (item: T) => Promise<void>): Promise<void> {
  for (let from = 0; from < items.length; from += width) await Promise.all(items.slice(from, from + width).map(fn));
}

/** Series on a /metrics text: its sample lines. */
function series(text: string): string[] {
  return text.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
}

describe('/metrics as tenants become active (default metrics.tenantLabels: first:100)', () => {
  // Sized for a busy 2-core machine: the property is that series stop growing past the slots;
  // the bench's many-tenants scenario counts them after 2,000 active tenants (BENCHMARKS.md).
  const N = 200;
  let broker: BrokerDouble;
  let h: EdgeHarness;

  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    h = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } }, tenants: manyTenants(N, [broker.url]) }), {
      usageFlushMs: 50,
    });
  });

  afterAll(async () => {
    await h?.close();
    await broker?.close();
  });

  /** Each tenant makes a request its plan refuses (403, metered for it: requests and usage families). */
  const activate = (ids: readonly number[]) =>
    inBatches(ids, 20, async (i) => {
      const id = manyTenantId(i);
      expect((await call(h, 'GET', '/api/v1/kv/x', { token: fastToken(id), host: `${id}.localhost` })).status).toBe(403);
    });
  const scrape = async (): Promise<string> => {
    // The meter's totals (the usage families) are read up to the last flush.
    await waitFor(() => usageSettled(h), 5000, 'usage flushed');
    return (await admin(h, 'GET', '/metrics', { token: null })).text;
  };
  const tenantSeries = (text: string) => series(text).filter((s) => s.includes('tenant="'));

  it('series stop growing past 100 tenants: later ones count under _other, which sums them; the usage API keeps exact figures', async () => {
    const ids = Array.from({ length: N }, (_, i) => i);
    // The first 100 take the slots, the next ones make the _other series.
    await activate(ids.slice(0, 100));
    await activate(ids.slice(100, 110));
    const before = tenantSeries(await scrape()).map((s) => s.replace(/ \S+$/, ''));
    await activate(ids.slice(120));
    const text = await scrape();
    // The same series, with larger values: 90 more tenants added none.
    expect(tenantSeries(text).map((s) => s.replace(/ \S+$/, ''))).toEqual(before);
    const requestTenants = new Set(series(text).flatMap((s) => (s.startsWith('queen_edge_requests_total{') ? [/tenant="([^"]*)"/.exec(s)![1]!] : [])));
    expect(requestTenants.size).toBe(101);
    expect(requestTenants.has(OTHER_TENANT)).toBe(true);
    expect(Number(new RegExp(`^queen_edge_usage_requests_total\\{tenant="${OTHER_TENANT}"\\} (\\S+)$`, 'm').exec(text)?.[1])).toBe(
      // A suspended tenant's refusal is not metered (every tenth is suspended).
      ids.slice(100).filter((i) => i % 10 !== 9).length,
    );
    // Exact per-tenant figures stay in the usage API, whichever label a tenant has on /metrics.
    const last = manyTenantId(N - 1);
    expect((await admin(h, 'GET', `/admin/v1/tenants/${last}/usage`)).json.total.requests).toBe(1);
  });
});
