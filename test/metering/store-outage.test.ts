/**
 * Usage with the durable store: flushed to the ledger (and read back from it by the usage API and
 * the export), held in the bounded buffer while PostgreSQL is stopped under load and written once
 * it is back, every admitted request counted; a full buffer drops counts and says so in a metric
 * and the log. Real PostgreSQL: a private server this test stops and starts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { PrivatePostgres } from '../helpers/pg.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, metric, usageSettled } from '../admin/admin-call.js';

let broker: BrokerDouble;
let server: PrivatePostgres;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  server = await PrivatePostgres.start();
}, 60_000);

afterAll(async () => {
  server?.destroy();
  await broker?.close();
});

const TENANTS = ['acme', 'beta', 'gamma'];

function config(schema: string, bufferEntries?: number) {
  const tenants = Object.fromEntries(TENANTS.map((id) => [id, { plan: 'test', hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true }]));
  return testConfig([broker.url], {
    store: { url: server.url, schema, timeoutMs: 500, ...(bufferEntries ? { usageBufferEntries: bufferEntries } : {}) },
    server: { admin: { token: ADMIN_TOKEN } },
    tenants,
  });
}

async function push(h: EdgeHarness, tenant: string, tag: string): Promise<number> {
  const tok = await token({ roles: ['read-write'], tenant });
  const r = await call(h, 'POST', '/api/v1/push', {
    token: tok,
    host: `${tenant}.localhost`,
    body: { items: [{ queue: 'q', transactionId: tag, payload: 1 }] },
  });
  return r.status;
}

/** Requests of a tenant the ledger holds, read straight from PostgreSQL. */
async function ledgerRequests(schema: string, tenant: string): Promise<number> {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    const rows = await client.query(`SELECT coalesce(sum(requests), 0) AS n FROM ${schema}.usage_hour WHERE tenant = $1`, [tenant]);
    return Number(rows.rows[0].n);
  } finally {
    await client.end();
  }
}

const labelled = async (h: EdgeHarness, series: string): Promise<number> => {
  const text = (await admin(h, 'GET', '/metrics', { token: null })).text;
  return Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
};

describe('usage in the durable store', () => {
  it('is flushed to the ledger and the usage API and export read it from there', async () => {
    const h = await startEdge(config('usage_reads'), { usageFlushMs: 50 });
    try {
      for (let i = 0; i < 4; i++) expect(await push(h, 'acme', `r${i}`)).toBe(201);
      await waitFor(async () => (await ledgerRequests('usage_reads', 'acme')) === 4, 5000, 'the ledger rows');
      const usage = await admin(h, 'GET', '/admin/v1/tenants/acme/usage');
      expect(usage.json.total).toMatchObject({ requests: 4, messagesPushed: 4 });
      const csv = await admin(h, 'GET', '/admin/v1/usage/export?format=csv&granularity=day&zeros=omit');
      expect(csv.text.split('\n').filter((l) => l.includes('"acme"'))[0]).toMatch(/"acme",4,4,/);
    } finally {
      await h.close();
    }
  });

  it('PostgreSQL stopped under load: usage waits in the buffer and every admitted request is in the ledger after the restart', async () => {
    const h = await startEdge(config('usage_outage'), { usageFlushMs: 50 });
    let sent = 0;
    let running = true;
    const load = (async () => {
      while (running) {
        const status = await push(h, TENANTS[sent % 3]!, `l${sent}`);
        expect(status).toBe(201);
        sent++;
      }
    })();
    try {
      await waitFor(() => sent >= 20, 5000, 'load running');
      server.stop('immediate');
      const failures = await metric(h, 'queen_edge_metering_flush_failures_total');
      await waitFor(async () => (await metric(h, 'queen_edge_metering_flush_failures_total')) > failures, 5000, 'a failed flush');
      const during = sent;
      await waitFor(() => sent >= during + 30, 10_000, 'requests served while the store is down');
      expect(await metric(h, 'queen_edge_usage_buffered_requests')).toBeGreaterThan(0);
      server.restart();
      await waitFor(() => sent >= during + 60, 10_000, 'requests after the restart');
      running = false;
      await load;
      await waitFor(() => usageSettled(h), 10_000, 'everything flushed');
      const counted = await Promise.all(TENANTS.map((t) => ledgerRequests('usage_outage', t)));
      expect(counted.reduce((a, b) => a + b, 0)).toBe(sent);
      expect(await metric(h, 'queen_edge_usage_buffered_entries')).toBe(0);
      expect(await labelled(h, 'queen_edge_usage_dropped_total{field="requests"}')).toBe(0);
    } finally {
      running = false;
      await load.catch(() => {});
      server.restart();
      await h.close();
    }
  });

  it('a full buffer drops counts and says what and how much, in a metric and the log', async () => {
    const captured = capturingLogger('info');
    // Two tenant-hours fit: acme's and beta's; gamma's is dropped while the store is down.
    const h = await startEdge(config('usage_full', 2), { usageFlushMs: 50, log: captured.log });
    try {
      server.stop('fast');
      for (const t of ['acme', 'beta']) expect(await push(h, t, `f-${t}`)).toBe(201);
      for (let i = 0; i < 3; i++) expect(await push(h, 'gamma', `f-g${i}`)).toBe(201);
      expect(await labelled(h, 'queen_edge_usage_dropped_total{field="requests"}')).toBe(3);
      expect(await labelled(h, 'queen_edge_usage_dropped_total{field="messages_pushed"}')).toBe(3);
      await waitFor(() => captured.lines.some((l) => l.msg.startsWith('metering: usage buffer full')), 5000, 'the buffer-full line');
      server.restart();
      await waitFor(() => usageSettled(h), 10_000, 'the buffer flushed');
      await waitFor(() => captured.lines.some((l) => l.msg.startsWith('metering: usage dropped')), 5000, 'the drop summary');
      const summary = captured.lines.find((l) => l.msg.startsWith('metering: usage dropped'))!;
      expect(summary.dropped).toMatchObject({ requests: 3, messagesPushed: 3 });
      expect(await ledgerRequests('usage_full', 'acme')).toBe(1);
      expect(await ledgerRequests('usage_full', 'gamma')).toBe(0);
    } finally {
      server.restart();
      await h.close();
    }
  });
});
