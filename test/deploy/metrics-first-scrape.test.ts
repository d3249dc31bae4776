/**
 * With several workers, the first /metrics scrape after a start answers 200 even while a worker is
 * still starting: the primary does not wait for a worker that has counted nothing yet.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { TEST_PLAN } from '../helpers/edge.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { edgeTracker, freePort, freshRequest } from './edge-process.js';

const edges = edgeTracker();
const prefix = uniquePrefix();
afterEach(async () => {
  await edges.cleanup();
  const redis = await connectTest(SHARED_REDIS_URL, 2000);
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

// Three processes (a primary, two workers) starting under tsx: seconds when idle, far more on a busy machine.
describe('/metrics with workers', { timeout: 90_000 }, () => {
  it('answers the first scrape, taken as soon as the admin port accepts', async () => {
    const adminPort = await freePort();
    const edge = await edges.start({
      server: { https: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: adminPort }, workers: 2 },
      log: { level: 'info' },
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
      plans: { test: TEST_PLAN },
      tenants: {},
    });
    // The first worker listening is the signal; the others are typically still loading.
    await edge.waitForLog((l) => l.msg === 'worker listening', 40_000);
    const first = await freshRequest(`http://127.0.0.1:${adminPort}/metrics`);
    expect(first.status).toBe(200);
    expect(Number(/^queen_edge_workers (\d+)$/m.exec(first.text)?.[1])).toBeGreaterThanOrEqual(1);
    await edge.waitForLog((l) => l.msg === 'all workers listening', 40_000);
    const later = await freshRequest(`http://127.0.0.1:${adminPort}/metrics`);
    expect(/^queen_edge_workers (\d+)$/m.exec(later.text)?.[1]).toBe('2');
  });
});
