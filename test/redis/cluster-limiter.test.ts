/** The limit store on a real Redis Cluster: one slot per tenant, one EVALSHA per admit, batched per master. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster, Redis } from 'ioredis';
import { RedisLimitStore } from '../../src/limits/redis-store.js';
import { compileLimitPlan, monthWindow } from '../../src/limits/verdict.js';
import { limiterKeys } from '../../src/redis/keys.js';
import { commandCalls, uniquePrefix } from '../helpers/redis.js';
import { RedisCluster } from '../helpers/redis-cluster.js';
import calculateSlot from 'cluster-key-slot';

let cluster: RedisCluster;
let client: Cluster;
/** Port → a plain client of that node. */
const nodes = new Map<number, Redis>();

beforeAll(async () => {
  cluster = await RedisCluster.start();
  client = await cluster.client();
  for (const port of await cluster.masters()) nodes.set(port, await cluster.nodeClient(port));
}, 40_000);
afterAll(async () => {
  await cluster?.stop();
});

const plan = compileLimitPlan(
  { requestsPerSec: 1, requestBurst: 3, messagesPerSec: 1000, messageBurst: 1000, parkedPolls: 10, maxPayloadBytes: 1024, maxBatch: 10 },
  { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
);
const cost = { messages: 0, ingressBytes: 0, parkedPoll: false };

/** Per master: command calls and read events processed so far. */
async function nodeStats(): Promise<Map<number, { calls: Map<string, number>; reads: number }>> {
  const out = new Map<number, { calls: Map<string, number>; reads: number }>();
  for (const [port, r] of nodes) {
    const reads = Number(/total_reads_processed:(\d+)/.exec(await r.info('stats'))![1]);
    out.set(port, { calls: await commandCalls(r), reads });
  }
  return out;
}

describe('RedisLimitStore on a Redis Cluster', () => {
  it("keeps each tenant's limiter keys in one slot", () => {
    const k = limiterKeys('qe:', 'acme', '202601');
    const slots = new Set([k.requests, k.messages, k.parked, k.monthMessages, k.monthBytes].map((key) => calculateSlot(key)));
    expect(slots.size).toBe(1);
  });

  it('sends the admits of one turn as one pipeline per master: one EVALSHA per tenant, a few reads per node', async () => {
    const prefix = uniquePrefix();
    const store = new RedisLimitStore(client, prefix);
    await store.preload();
    // Thirty tenants spread over the three masters; ten admits each, all issued in one turn.
    const tenants = Array.from({ length: 30 }, (_, i) => `t${i}`);
    const owner = new Map<string, number>();
    for (const t of tenants) owner.set(t, await cluster.masterOf(limiterKeys(prefix, t, '000000').requests));
    expect(new Set(owner.values()).size).toBe(3);
    const now = Date.now();
    const month = monthWindow(now);
    const before = await nodeStats();
    const decisions = await Promise.all(Array.from({ length: 300 }, (_, i) => store.admit(tenants[i % 30]!, plan, cost, now, month, `s${i}`, 60000)));
    const after = await nodeStats();
    // Burst 3: exactly three admitted per tenant, however the batch was split.
    const admitted = new Map<string, number>();
    decisions.forEach((d, i) => {
      if (d.refused === 0) admitted.set(tenants[i % 30]!, (admitted.get(tenants[i % 30]!) ?? 0) + 1);
    });
    expect([...admitted.values()]).toEqual(tenants.map(() => 3));
    for (const [port, b] of before) {
      const a = after.get(port)!;
      const delta = (cmd: string): number => (a.calls.get(cmd) ?? 0) - (b.calls.get(cmd) ?? 0);
      const expected = tenants.filter((t) => owner.get(t) === port).length;
      expect({ port, evalsha: delta('evalsha'), eval: delta('eval') }).toEqual({ port, evalsha: expected, eval: 0 });
      // One write per node carries ~100 admits (~40 KB); Redis reads it in a few 16-KB chunks,
      // plus this test's own INFO calls. One write per admit would show about a hundred reads.
      expect(a.reads - b.reads).toBeLessThan(15);
    }
  });

  it('falls back to EVAL per admit on a node that lost the script (a promoted replica), still batched', async () => {
    const prefix = uniquePrefix();
    const store = new RedisLimitStore(client, prefix);
    for (const r of nodes.values()) await r.script('FLUSH');
    const now = Date.now();
    const month = monthWindow(now);
    const decisions = await Promise.all(Array.from({ length: 40 }, (_, i) => store.admit(`u${i % 8}`, plan, cost, now, month, `s${i}`, 60000)));
    expect(decisions.filter((d) => d.refused === 0)).toHaveLength(8 * 3);
  });
});
