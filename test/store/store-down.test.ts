/**
 * The durable store stopped under load: requests keep being served from memory, admin writes
 * answer 503 store_unavailable, /readyz stays ready but says degraded, the store gauge reads 0;
 * once PostgreSQL is back, admin writes work again and the peer catches up.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { PrivatePostgres } from '../helpers/pg.js';
import { PrivateRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin, metric } from '../admin/admin-call.js';

let broker: BrokerDouble;
let redis: PrivateRedis;
let pg: PrivatePostgres;
let a: EdgeHarness;
let b: EdgeHarness;
let t: string;

beforeAll(async () => {
  [broker, redis, pg] = await Promise.all([startBrokerDouble(), PrivateRedis.start(), PrivatePostgres.start()]);
  const config = testConfig([broker.url], {
    redis: { url: redis.url, keyPrefix: 'qe:', timeoutMs: 1000 },
    store: { url: pg.url, timeoutMs: 1000 },
    server: { admin: { token: ADMIN_TOKEN } },
  });
  [a, b] = [await startEdge(config), await startEdge(config)];
  t = await token({ roles: ['read-write'], tenant: 'acme' });
}, 60_000);

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await Promise.all([broker?.close(), redis?.kill()]);
  pg?.destroy();
});

const push = (h: EdgeHarness) => call(h, 'POST', '/api/v1/push', { token: t, body: { items: [{ queue: 'q', payload: 1 }] } });
const storage = (h: EdgeHarness, usedBytes: number) => admin(h, 'PUT', '/admin/v1/tenants/acme/storage', { body: { usedBytes } });

describe('the durable store stopped under load', () => {
  it('serving goes on, admin writes answer 503 store_unavailable, readiness and the gauge say so; after the restart writes work and peers catch up', {
    timeout: 60_000,
  }, async () => {
    expect((await storage(a, 1)).status).toBe(200);
    // Load on both edges for the whole outage: every request must be served.
    let stop = false;
    const statuses: number[] = [];
    const load = Promise.all(
      [a, b].map(async (h) => {
        while (!stop) statuses.push((await push(h)).status);
      }),
    );
    try {
      pg.stop('immediate');
      const refused = await storage(a, 2);
      expect(refused.status).toBe(503);
      expect(refused.json).toMatchObject({ code: 'store_unavailable' });
      await waitFor(async () => (await metric(b, 'queen_edge_store_up')) === 0, 15_000, 'the store gauge at 0 on b');
      const ready = await admin(b, 'GET', '/readyz', { token: null });
      expect(ready.status).toBe(200);
      expect(ready.json.degraded).toEqual([expect.stringContaining('store unavailable')]);
      const during = statuses.length;
      await waitFor(() => statuses.length > during + 20, 10_000, 'requests served while the store is down');

      pg.restart();
      await waitFor(async () => (await storage(a, 3)).status === 200, 15_000, 'an admin write once the store is back');
      await waitFor(async () => (await admin(b, 'GET', '/admin/v1/tenants/acme')).json?.storage?.usedBytes === 3, 10_000, 'b caught up');
      await waitFor(async () => (await metric(b, 'queen_edge_store_up')) === 1, 10_000, 'the store gauge at 1 on b');
      expect((await admin(b, 'GET', '/readyz', { token: null })).json).toEqual({ status: 'ready' });
    } finally {
      stop = true;
      await load;
    }
    expect(statuses.filter((s) => s !== 201)).toEqual([]);
  });
});
