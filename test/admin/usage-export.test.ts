/**
 * The billing export: a month of synthetic hourly usage for 1,000 tenants written straight into
 * Redis in the usage store's layout, exported through the admin listener (CSV and JSON Lines) and
 * through the CLI; the in-memory store; and the generator's bounded read-ahead.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAdminHandler } from '../../src/admin/api.js';
import { runAdminCli } from '../../src/admin/cli-commands.js';
import { silentLogger } from '../../src/observability/log.js';
import type { TenantStore } from '../../src/tenants/store.js';
import { HOUR_MS, UsageCounts, dayId, hourFields } from '../../src/metering/counts.js';
import { EXPORT_COLUMNS, batchSize, exportChunks } from '../../src/metering/export.js';
import { usageDayKey } from '../../src/redis/keys.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { ADMIN_TOKEN, admin } from './admin-call.js';

const TENANTS = 1000;
const FROM = Date.UTC(2026, 10, 1); // November 2026: 30 days, 720 hours
const TO = Date.UTC(2026, 11, 1);
const HOURS = (TO - FROM) / HOUR_MS;
const ids = Array.from({ length: TENANTS }, (_, i) => `t${String(i).padStart(4, '0')}`);

/** The synthetic counts of tenant i in hour h of the month. */
function synthetic(i: number, h: number): UsageCounts {
  const c = new UsageCounts();
  c.requests = (i % 7) + 1 + (h % 3);
  c.messagesPushed = i % 5;
  c.egressBytes = 100 * (i % 3);
  if (h % 24 === 0) c.refusals.rate_limited = 2;
  return c;
}

const prefix = uniquePrefix();
let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  // One broker double for all: declared tenancy-aware, as a shared broker must be.
  const tenants = {
    acme: { tenancyAwareBrokers: true },
    ...Object.fromEntries(ids.map((id) => [id, { plan: 'test', hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true }])),
  };
  edge = await startEdge(
    testConfig([broker.url], { redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 200 }, server: { admin: { token: ADMIN_TOKEN } }, tenants }),
  );
  // One HSET per tenant-day, in the store's layout (<prefix>{usage}:d:<tenant>:<yyyymmdd>, `<hh>:<field>`).
  const r = await connectTest(SHARED_REDIS_URL, 10000);
  for (let i = 0; i < TENANTS; i += 100) {
    const pipe = r.pipeline();
    for (let k = i; k < i + 100; k++) {
      for (let day = 0; day < HOURS / 24; day++) {
        const fields: Array<string | number> = [];
        for (let hh = 0; hh < 24; hh++) for (const [f, n] of hourFields(hh, synthetic(k, day * 24 + hh))) fields.push(f, n);
        pipe.hset(usageDayKey(prefix, ids[k]!, dayId(FROM + day * 24 * HOUR_MS)), ...fields);
      }
    }
    await pipe.exec();
  }
  r.disconnect();
}, 120_000);

afterAll(async () => {
  await edge?.close();
  await broker?.close();
  const r = await connectTest(SHARED_REDIS_URL, 10000);
  await flushPrefix(r, prefix);
  r.disconnect();
}, 120_000);

/** Streams a response's lines to `onLine` without keeping them; returns the number of body chunks. */
async function eachLine(body: AsyncIterable<Buffer>, onLine: (line: string) => void): Promise<number> {
  let chunks = 0;
  let rest = '';
  for await (const chunk of body) {
    chunks++;
    const lines = (rest + chunk.toString('utf8')).split('\n');
    rest = lines.pop()!;
    for (const l of lines) onLine(l);
  }
  expect(rest).toBe('');
  return chunks;
}

const query = (g: string, format: string) =>
  `/admin/v1/usage/export?from=${new Date(FROM).toISOString()}&to=${new Date(TO).toISOString()}&granularity=${g}&format=${format}`;

describe('usage export over a month of hourly usage for 1,000 tenants (Redis)', () => {
  // The one full-size export (720,720 rows): on a loaded 2-core machine it takes about 20 s.
  it('hourly CSV: the header, one row per tenant per hour, the sums, streamed in many chunks', { timeout: 120_000 }, async () => {
    const res = await request(`${edge.adminUrl}${query('hour', 'csv')}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(res.headers['content-length']).toBeUndefined();
    let header: string | null = null;
    let rows = 0;
    const perTenant = new Map<string, { rows: number; requests: number; pushed: number; egress: number; refused: number; rateLimited: number }>();
    const col = (name: string) => EXPORT_COLUMNS.indexOf(name);
    const chunks = await eachLine(res.body, (line) => {
      if (header === null) {
        header = line;
        return;
      }
      rows++;
      // The config's own tenant, acme, sorts first and has no usage: zero rows, still one per hour.
      if (rows === 1)
        expect(line.split(',')).toEqual(['"2026-11-01T00:00:00.000Z"', '"2026-11-01T01:00:00.000Z"', '"acme"', ...EXPORT_COLUMNS.slice(3).map(() => '0')]);
      if (!line.includes(',"t0003",') && !line.includes(',"t0999",')) return;
      const v = line.split(',');
      const t = v[col('tenant')]!.slice(1, -1);
      const s = perTenant.get(t) ?? { rows: 0, requests: 0, pushed: 0, egress: 0, refused: 0, rateLimited: 0 };
      s.rows++;
      s.requests += Number(v[col('requests')]);
      s.pushed += Number(v[col('messages_pushed')]);
      s.egress += Number(v[col('egress_bytes')]);
      s.refused += Number(v[col('refusals_total')]);
      s.rateLimited += Number(v[col('refusals_rate_limited')]);
      perTenant.set(t, s);
    });
    expect(header).toBe(EXPORT_COLUMNS.join(','));
    expect(rows).toBe((TENANTS + 1) * HOURS);
    // Far more chunks than read batches: the body is written as it is produced, not built first.
    expect(chunks).toBeGreaterThan(TENANTS / batchSize(FROM, TO));
    for (const i of [3, 999]) {
      let requests = 0;
      for (let h = 0; h < HOURS; h++) requests += synthetic(i, h).requests;
      expect(perTenant.get(ids[i]!)).toEqual({ rows: HOURS, requests, pushed: (i % 5) * HOURS, egress: 100 * (i % 3) * HOURS, refused: 60, rateLimited: 60 });
    }
  });

  it('daily JSON Lines: one object per tenant per day with the same column names', async () => {
    const res = await request(`${edge.adminUrl}${query('day', 'jsonl')}&tenant=t0010&tenant=t0011`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
    expect(res.statusCode).toBe(200);
    let rows = 0;
    let day1OfT0010: Record<string, unknown> | null = null;
    await eachLine(res.body, (line) => {
      rows++;
      const doc = JSON.parse(line) as Record<string, unknown>;
      if (rows === 1) expect(Object.keys(doc)).toEqual(EXPORT_COLUMNS);
      if (doc.tenant === 't0010' && doc.period_start === '2026-11-02T00:00:00.000Z') day1OfT0010 = doc;
    });
    expect(rows).toBe(2 * 30);
    let requests = 0;
    for (let h = 24; h < 48; h++) requests += synthetic(10, h).requests;
    expect(day1OfT0010).toMatchObject({
      period_end: '2026-11-03T00:00:00.000Z',
      requests,
      messages_pushed: 0,
      egress_bytes: 100 * 24,
      refusals_rate_limited: 2,
      refusals_total: 2,
    });
  });

  it('named tenants only, a deleted one included; bad parameters are JSON refusals', async () => {
    const r = await admin(edge, 'GET', `${query('day', 'csv')}&tenant=t0001&tenant=gone-tenant`);
    expect(r.status).toBe(200);
    const lines = r.text.trimEnd().split('\n');
    expect(lines).toHaveLength(1 + 2 * 30);
    expect(lines.at(-1)!.split(',')[2]).toBe('"gone-tenant"');
    for (const [q, field] of [
      ['granularity=month', 'granularity'],
      ['format=xml', 'format'],
      ['from=yesterday', 'from'],
      ['tenant=a%20b', 'tenant'],
    ] as const) {
      const bad = await admin(edge, 'GET', `/admin/v1/usage/export?${q}`);
      expect(bad.status).toBe(400);
      expect(bad.json).toMatchObject({ code: 'invalid_request' });
      expect(bad.json.error).toContain(field);
    }
    expect((await admin(edge, 'GET', query('day', 'csv'), { token: 'wrong' })).status).toBe(401);
  });

  it('queen-edge usage export streams the same rows to stdout', async () => {
    let text = '';
    const stdout = new Writable({
      write: (c, _e, cb) => {
        text += String(c);
        cb();
      },
    });
    const stderr = new Writable({ write: (_c, _e, cb) => cb() });
    const code = await runAdminCli(
      [
        'usage',
        'export',
        '--from',
        '2026-11-05T00:00:00Z',
        '--to',
        '2026-11-06T00:00:00Z',
        '--granularity',
        'day',
        '--tenant',
        't0002',
        '--url',
        edge.adminUrl,
        '--token',
        ADMIN_TOKEN,
      ],
      { stdout, stderr, env: {} },
    );
    expect(code).toBe(0);
    const [head, row, ...more] = text.trimEnd().split('\n');
    expect(head).toBe(EXPORT_COLUMNS.join(','));
    expect(more).toEqual([]);
    expect(row!.split(',').slice(0, 4)).toEqual(['"2026-11-05T00:00:00.000Z"', '"2026-11-06T00:00:00.000Z"', '"t0002"', String(24 * 3 + 24)]);
    expect(await runAdminCli(['usage', 'export', '--format', 'xml', '--url', edge.adminUrl, '--token', ADMIN_TOKEN], { stdout, stderr, env: {} })).toBe(1);
  });
});

describe('usage export from the in-memory store', () => {
  it('exports what the edge metered this hour', async () => {
    const mem = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } } }));
    try {
      const tok = await token({ roles: ['read-write'], tenant: 'acme' });
      for (let i = 0; i < 3; i++)
        expect((await call(mem, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'q', payload: { i } }] } })).status).toBe(201);
      // Three hours around now, so an hour boundary passing during the test changes nothing.
      const hour = Date.now() - (Date.now() % HOUR_MS);
      const r = await admin(
        mem,
        'GET',
        `/admin/v1/usage/export?from=${new Date(hour - HOUR_MS).toISOString()}&to=${new Date(hour + 2 * HOUR_MS).toISOString()}&format=jsonl`,
      );
      expect(r.status).toBe(200);
      const docs = r.text
        .trimEnd()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(docs.map((d) => d.period_start)).toEqual([-1, 0, 1].map((k) => new Date(hour + k * HOUR_MS).toISOString()));
      expect(docs.every((d) => d.tenant === 'acme')).toBe(true);
      const sum = (f: string) => docs.reduce((n, d) => n + d[f], 0);
      expect([sum('requests'), sum('messages_pushed')]).toEqual([3, 3]);
    } finally {
      await mem.close();
    }
  });
});

describe('exportChunks', () => {
  it('reads ahead of the consumer by at most one batch of tenants', async () => {
    const many = Array.from({ length: 5000 }, (_, i) => `x${i}`);
    let reads = 0;
    const read = async () => {
      reads++;
      return new Map<number, UsageCounts>();
    };
    const it = exportChunks({ tenants: many, fromMs: FROM, toMs: TO, granularity: 'hour', format: 'csv' }, read)[Symbol.asyncIterator]();
    let pulled = 0;
    for (; pulled < 11; pulled++) expect((await it.next()).done).toBe(false); // header + 10 tenants
    expect(reads).toBeLessThanOrEqual(batchSize(FROM, TO));
    expect(reads).toBeLessThan(many.length);
    await it.return(undefined);
  });
});

describe('a usage store failing in the middle of an export', () => {
  it('cuts the response before its end: the client sees an error, not a short export', async () => {
    const handler = createAdminHandler({
      token: ADMIN_TOKEN,
      hostNames: new Set(),
      tenants: { backing: 'static', all: () => ids.map((id) => ({ id })) } as unknown as TenantStore,
      tenantRecord: async () => null,
      keys: {} as never,
      usage: async () => new Map(),
      usageExport: {
        flush: async () => true,
        read: async (id) => {
          if (id === 't0500') throw new Error('usage store gone');
          return new Map();
        },
      },
      stats: async () => ({}),
      planIds: () => [],
      brokers: () => [],
      maintenance: {
        read: async () => {
          throw new Error('not used');
        },
        set: async () => {
          throw new Error('not used');
        },
      },
      readiness: { notReadyReason: () => null },
      metricsText: async () => '',
      log: silentLogger(),
      clock: Date.now,
    });
    const server = http.createServer((req, res) => handler(req, res));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}${query('day', 'csv')}`, {
        headers: { authorization: `Bearer ${ADMIN_TOKEN}` },
      });
      expect(res.statusCode).toBe(200);
      let received = '';
      const read = (async () => {
        for await (const chunk of res.body) received += String(chunk);
      })();
      await expect(read).rejects.toThrow();
      // Rows of earlier batches arrived; nothing from the failing tenant or after it.
      expect(received).toContain(',"t0400",');
      expect(received).not.toContain(',"t0500",');
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
