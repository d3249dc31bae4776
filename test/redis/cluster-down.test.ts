/**
 * A whole Redis Cluster gone for good: the edge keeps answering as its fail mode says and stays
 * bounded in CPU and memory. ioredis's cluster subscriber reconnects the moment its node is gone,
 * with no delay; the tenant directory's subscriber used it, so with every node down the edge spun
 * a core in connect attempts and grew by hundreds of MiB a minute (two edges left running after a
 * failed test reached 4 GiB each). The subscriber is now a plain connection with backoff.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import { uniquePrefix } from '../helpers/redis.js';

let cluster: RedisCluster;
let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  cluster = await RedisCluster.start();
  broker = await startBrokerDouble();
  edge = await startEdge(
    testConfig([broker.url], { redis: { url: null, cluster: cluster.seeds, keyPrefix: uniquePrefix(), failMode: 'local', timeoutMs: 200 } }),
  );
}, 40_000);
afterAll(async () => {
  await edge?.close();
  await broker?.close();
  await cluster?.stop();
}, 20_000);

/** This process's CPU seconds (the edge runs in it) and its RSS in MiB. */
function usage(): { cpu: number; rssMiB: number } {
  const u = process.cpuUsage();
  return { cpu: (u.user + u.system) / 1e6, rssMiB: process.memoryUsage().rss / 1048576 };
}

it('with every node down, answers in failMode local and uses little CPU and no growing memory', async () => {
  const jwt = await token({ roles: ['read-write'], tenant: 'acme' });
  expect((await call(edge, 'GET', '/api/v1/pop/queue/q?batch=1', { token: jwt })).status).toBe(204);
  await cluster.stop();
  const before = usage();
  const started = Date.now();
  const statuses: number[] = [];
  // Light traffic for the window: every request still answered, from the local limiter.
  while (Date.now() - started < 6000) {
    statuses.push((await call(edge, 'GET', '/api/v1/pop/queue/q?batch=1', { token: jwt })).status);
    await new Promise((r) => setTimeout(r, 100)); // pacing: the load is what is measured against
  }
  const after = usage();
  const seconds = (Date.now() - started) / 1000;
  expect(new Set(statuses)).toEqual(new Set([204]));
  // Before the fix: about 1.2 cores and +400 MiB over such a window. Bounds leave room for a busy machine.
  expect((after.cpu - before.cpu) / seconds).toBeLessThan(0.35);
  expect(after.rssMiB - before.rssMiB).toBeLessThan(64);
}, 60_000);
