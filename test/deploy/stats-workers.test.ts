/**
 * Live stats with two workers (node:cluster): `/admin/v1/stats` answered by either worker covers
 * both, since it is derived from the primary's aggregate of every worker's metrics.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, TEST_SECRET, token } from '../helpers/edge.js';
import { ADMIN_TOKEN } from '../admin/admin-call.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { freePort, freshRequest, spawnEdge, type EdgeProcess } from './edge-process.js';

let broker: BrokerDouble;
let edge: EdgeProcess;
let httpsPort: number;
let adminPort: number;
const prefix = uniquePrefix();

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  httpsPort = await freePort();
  adminPort = await freePort();
  edge = await spawnEdge({
    server: { https: { host: '127.0.0.1', port: httpsPort }, admin: { host: '127.0.0.1', port: adminPort, token: ADMIN_TOKEN }, workers: 2 },
    log: { level: 'info' },
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
    auth: { secret: TEST_SECRET },
    plans: { test: TEST_PLAN },
    tenants: { acme: { plan: 'test', hosts: ['acme.localhost'], brokers: [broker.url] } },
  });
  // Three processes starting under tsx: seconds when idle, far more on a busy CI machine.
  await edge.waitForLog((l) => l.msg === 'all workers listening', 60000);
}, 90000);

afterAll(async () => {
  await edge?.kill();
  await broker?.close();
  const redis = await connectTest(SHARED_REDIS_URL, 2000);
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

describe('GET /admin/v1/stats with two workers', () => {
  it('counts both workers and the requests either of them served', async () => {
    const jwt = await token({ roles: ['read-write'], tenant: 'acme' });
    for (let i = 0; i < 10; i++) {
      const r = await freshRequest(`https://127.0.0.1:${httpsPort}/api/v1/push`, {
        method: 'POST',
        headers: { host: 'acme.localhost', authorization: `Bearer ${jwt}`, 'content-type': 'application/json' },
        body: JSON.stringify({ items: [{ queue: 'q', payload: i }] }),
      });
      expect(r.status).toBe(201);
    }
    // Asked twice on fresh connections: whichever worker answers, the figures are the cluster's.
    for (let i = 0; i < 2; i++) {
      const r = await freshRequest(`http://127.0.0.1:${adminPort}/admin/v1/stats`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      expect(r.status).toBe(200);
      const stats = JSON.parse(r.text);
      expect(stats.workers).toBe(2);
      expect(stats.requests.total).toBe(10);
      expect(stats.redis).toMatchObject({ configured: true, failMode: 'local', limiterModes: { redis: 2 } });
    }
  });
});
