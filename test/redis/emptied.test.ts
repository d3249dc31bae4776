/**
 * Redis killed and started again empty under load, with the durable store: the edge notices (its
 * epoch key vanished), one edge re-seeds every tenant's month counters from the usage ledger, and
 * says so in the log and a metric. A tenant at its monthly quota before the loss is still refused
 * after it, and the ledger holds every request counted. Own Redis (killed), shared PostgreSQL
 * (a schema of its own).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { PrivateRedis, connectTest, uniquePrefix } from '../helpers/redis.js';
import { dropStore, uniqueStore } from '../helpers/pg.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, metric, usageSettled } from '../admin/admin-call.js';
import { LedgerUsageStore, ledgerTotals } from '../../src/metering/ledger.js';
import { Store } from '../../src/store/connection.js';
import { createLogger } from '../../src/observability/log.js';

const QUOTA = 10;
let broker: BrokerDouble;
let redis: PrivateRedis;
let client: Redis;
const target = uniqueStore();
const prefix = uniquePrefix();

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  redis = await PrivateRedis.start();
  client = await connectTest(redis.url, 1000);
});

afterAll(async () => {
  client?.disconnect();
  await redis?.kill();
  await broker?.close();
  await dropStore(target);
});

function config() {
  const tenant = (id: string, plan: string) => ({ plan, hosts: [`${id}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true });
  return testConfig([broker.url], {
    redis: { url: redis.url, keyPrefix: prefix, timeoutMs: 100, failMode: 'local' },
    store: target,
    server: { admin: { token: ADMIN_TOKEN } },
    plans: { capped: { ...TEST_PLAN, quotas: { messagesPerMonth: QUOTA, ingressBytesPerMonth: 0 } } },
    tenants: { acme: tenant('acme', 'capped'), beta: tenant('beta', 'test') },
  });
}

async function push(h: EdgeHarness, tenant: string, tag: string): Promise<{ status: number; code?: string }> {
  const tok = await token({ roles: ['read-write'], tenant });
  const r = await call(h, 'POST', '/api/v1/push', {
    token: tok,
    host: `${tenant}.localhost`,
    body: { items: [{ queue: 'q', transactionId: tag, payload: 1 }] },
  });
  return { status: r.status, code: (r.json as { code?: string } | undefined)?.code };
}

const monthId = (): string => new Date().toISOString().slice(0, 7).replace('-', '');
const monthCounter = async (tenant: string): Promise<number> => Number((await client.get(`${prefix}{t:${tenant}}:qm:${monthId()}`)) ?? 0);

describe('Redis came back empty', () => {
  it('is noticed, the month counters are re-seeded from the ledger, and a spent quota stays spent', async () => {
    const captured = capturingLogger('info');
    const a = await startEdge(config(), { usageFlushMs: 50, log: captured.log });
    let b: EdgeHarness | null = null;
    let sent = 0;
    let running = true;
    let load: Promise<void> = Promise.resolve();
    try {
      for (let i = 0; i < QUOTA; i++) expect((await push(a, 'acme', `q${i}`)).status).toBe(201);
      expect(await push(a, 'acme', 'over')).toEqual({ status: 429, code: 'quota_exceeded' });
      load = (async () => {
        while (running) {
          expect((await push(a, 'beta', `l${sent}`)).status).toBe(201);
          sent++;
        }
      })();
      await waitFor(() => sent >= 20, 5000, 'load running');
      await waitFor(
        async () => (await admin(a, 'GET', '/admin/v1/tenants/acme/usage')).json.total.messagesPushed === QUOTA,
        5000,
        "acme's usage in the ledger",
      );

      await redis.kill();
      const down = sent;
      await waitFor(() => sent >= down + 20, 10_000, 'requests served while Redis is down');
      // Counted from before the restart: nothing can be admitted on the new Redis earlier.
      const restarted = sent;
      await redis.restart();
      await waitFor(async () => (await metric(a, 'queen_edge_month_counters_reseeded_total')) >= 2, 10_000, 'the re-seed');
      const reseeded = sent;
      await waitFor(() => sent >= reseeded + 20, 10_000, 'requests after the re-seed');
      running = false;
      await load;
      await waitFor(() => usageSettled(a), 10_000, 'everything flushed');

      expect(await metric(a, 'queen_edge_redis_emptied_total')).toBe(1);
      const reseedLine = () => captured.lines.find((l) => l.msg === 'month counters re-seeded from the usage ledger');
      await waitFor(() => captured.lines.some((l) => l.msg.startsWith('redis came back empty')) && reseedLine() !== undefined, 5000, 'the log lines');
      expect(reseedLine()).toMatchObject({ tenants: 2, atStart: false });

      const reader = new Store(target, createLogger('silent'));
      try {
        const start = new Date();
        const totals = await ledgerTotals(
          reader,
          Date.UTC(start.getUTCFullYear(), start.getUTCMonth(), 1),
          Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + 1, 1),
        );
        // The quiet tenant's counter is its ledger total, exactly.
        expect(totals.get('acme')?.messages).toBe(QUOTA);
        expect(await monthCounter('acme')).toBe(QUOTA);
        // The ledger has every request counted (one message each)...
        const beta = await new LedgerUsageStore(reader).read('beta', 0, Date.now() + 3_600_000);
        expect([...beta.values()].reduce((n, c) => n + c.requests, 0)).toBe(sent);
        expect(totals.get('beta')?.messages).toBe(sent);
        // ...and the loaded tenant's counter is its ledger total, less at most what was admitted on
        // the new Redis but not yet flushed when the re-seed read the ledger (docs/store.md).
        const counter = await monthCounter('beta');
        expect(counter).toBeLessThanOrEqual(sent);
        // (+1: the one request in flight when the re-seed was seen.)
        expect(sent - counter).toBeLessThanOrEqual(reseeded - restarted + 1);
      } finally {
        await reader.close();
      }

      // An edge that never saw acme refused (no deny cache of its own) reads the re-seeded counter.
      b = await startEdge(config(), { usageFlushMs: 50 });
      expect(await push(b, 'acme', 'after')).toEqual({ status: 429, code: 'quota_exceeded' });
      expect(await metric(b, 'queen_edge_month_counters_reseeded_total')).toBe(0);
    } finally {
      running = false;
      await load.catch(() => {});
      await b?.close();
      await a.close();
    }
  });
});
