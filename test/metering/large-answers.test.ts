/**
 * A pop answer of 128 MiB (128 messages of 1 MiB) through a real edge: nothing holds the answer
 * while it streams (the live heap and buffers grow by at most a quarter of it, the process's RSS
 * by less than half), another tenant's requests keep being answered, the delivered count is
 * exact, and the lease id is still learnt (the lease's next call goes back to the broker that
 * served it). The full-size figures (286 MiB) are in RELIABILITY.md.
 */
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

const MESSAGES = 128;
const MESSAGE_BYTES = 1 << 20;
const MiB = 1 << 20;

v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as (opts?: { type: 'minor' | 'major' }) => void;

let brokers: BrokerDouble[];
let other: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  brokers = await Promise.all(
    ['a', 'b', 'c'].map((name) =>
      startBrokerDouble({ name, answers: { bigPop: { messages: WARM_MESSAGES, messageBytes: MESSAGE_BYTES, leaseId: `lease-${name}` } } }),
    ),
  );
  other = await startBrokerDouble();
  edge = await startEdge(
    testConfig(
      brokers.map((b) => b.url),
      {
        server: { admin: { token: ADMIN_TOKEN } },
        tenants: { other: { plan: 'test', hosts: ['other.localhost'], brokers: [other.url] } },
        plans: { test: TEST_PLAN },
      },
    ),
  );
});

afterAll(async () => {
  await edge?.close();
  await Promise.all([...(brokers ?? []), other].map((b) => b?.close()));
});

const WARM_MESSAGES = 8;

function bigPop(b: BrokerDouble) {
  return { messages: WARM_MESSAGES, messageBytes: MESSAGE_BYTES, leaseId: `lease-${b === brokers[0] ? 'a' : b === brokers[1] ? 'b' : 'c'}` };
}

function pop(rw: string) {
  return request(`${edge.httpUrl}/api/v1/pop/queue/big?batch=${MESSAGES}`, {
    headers: { host: 'acme.localhost', authorization: `Bearer ${rw}` },
    dispatcher: edge.dispatcher,
  });
}

/** Reads an answer to its end, keeping only its length. */
async function drain(res: Awaited<ReturnType<typeof pop>>): Promise<number> {
  expect(res.statusCode).toBe(200);
  let n = 0;
  for await (const chunk of res.body) n += (chunk as Buffer).length;
  return n;
}

describe('a pop answer far larger than any buffer', { timeout: 20_000 }, () => {
  it('streams with bounded RSS, keeps other tenants served, and is metered exactly', async () => {
    const rw = await token({ roles: ['read-write'], tenant: 'acme' });
    const otherRw = await token({ roles: ['read-write'], tenant: 'other' });
    let pushed = 0;
    const otherPush = async (): Promise<number> => {
      const t0 = performance.now();
      const r = await call(edge, 'POST', '/api/v1/push', { host: 'other.localhost', token: otherRw, body: { items: [{ queue: 'q', payload: pushed++ }] } });
      expect(r.status).toBe(201);
      return performance.now() - t0;
    };
    // Warm both paths with a smaller big answer first, so first-use allocations (compiled code,
    // socket and parser buffers, malloc arenas) are not counted as growth.
    await otherPush();
    await drain(await pop(rw));
    // The other tenant's push time with nothing streaming, on this machine as busy as it is now.
    const alone: number[] = [];
    for (let i = 0; i < 10; i++) alone.push(await otherPush());
    for (const b of brokers) b.setOptions({ answers: { bigPop: { ...bigPop(b), messages: MESSAGES } } });

    // Collected at every sample: the figures are what is held, not garbage awaiting a collection
    // (this process also runs the client and the broker double, whose relayed chunks are garbage).
    // Live memory (heap and buffers) is the exact measure of holding; RSS also moves with the
    // allocator's free lists and what a busy machine's scheduling leaves in flight, so its bound is
    // looser, yet below what holding the answer would take.
    const live = () => {
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    gc();
    const base = { rss: process.memoryUsage().rss, live: live() };
    const peak = { ...base };
    const sampler = setInterval(() => {
      gc();
      peak.rss = Math.max(peak.rss, process.memoryUsage().rss);
      peak.live = Math.max(peak.live, live());
    }, 200);

    let received = 0;
    let bigDone = false;
    const big = (async () => {
      received = await drain(await pop(rw));
      bigDone = true;
    })();

    // Another tenant's pushes, one after another, while the answer streams and just after it.
    const latencies: number[] = [];
    let during = 0;
    let after = 0;
    while (after < 5) {
      latencies.push(await otherPush());
      if (bigDone) after++;
      else during++;
    }
    await big;
    clearInterval(sampler);

    expect(received).toBeGreaterThan(MESSAGES * MESSAGE_BYTES);
    const liveGrowth = (peak.live - base.live) / MiB;
    const rssGrowth = (peak.rss - base.rss) / MiB;
    expect(liveGrowth, `heap and buffers grew ${liveGrowth.toFixed(1)} MiB`).toBeLessThanOrEqual(32);
    expect(rssGrowth, `RSS grew ${rssGrowth.toFixed(1)} MiB`).toBeLessThan((MESSAGES * MESSAGE_BYTES) / 2 / MiB);
    expect(latencies.length).toBeGreaterThan(5);
    // Served while the answer streams, not after it: the relay yields between chunks. Holding and
    // parsing the answer on the event loop stalled every tenant for seconds (3.4 s for 286 MiB on
    // a quiet machine); holding is what the live-memory bound above catches, so the ceiling here is
    // only against a stall of several seconds, relative to the same pushes with nothing streaming
    // so that a busy machine's slowness is not taken for one.
    expect(during, 'pushes answered while the answer streamed').toBeGreaterThanOrEqual(3);
    const worstAlone = Math.max(...alone);
    expect(Math.max(...latencies), `latencies ${latencies.map((l) => l.toFixed(0)).join(',')}; alone ${alone.map((l) => l.toFixed(0)).join(',')}`).toBeLessThan(
      2 * worstAlone + 3000,
    );

    let usage: any;
    await waitFor(
      async () => {
        usage = (await admin(edge, 'GET', '/admin/v1/tenants/acme/usage?granularity=hour')).json.total;
        return usage.messagesDelivered >= WARM_MESSAGES + MESSAGES;
      },
      5000,
      'the pop metered',
    );
    expect(usage).toMatchObject({ messagesDelivered: WARM_MESSAGES + MESSAGES });

    // The lease id was learnt from the same scan: its next call goes to the broker that served it.
    const served = brokers.findIndex((b) => forwarded(b).some((r) => r.path.startsWith('/api/v1/pop')));
    const lease = `lease-${'abc'[served]}`;
    for (let i = 0; i < 3; i++) {
      const r = await call(edge, 'POST', `/api/v1/lease/${lease}/extend`, { token: rw, body: { seconds: 10 } });
      expect(r.status).toBe(200);
    }
    expect(forwarded(brokers[served]!).filter((r) => r.path.includes('/extend'))).toHaveLength(3);
  });
});
