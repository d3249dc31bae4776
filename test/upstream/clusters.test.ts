import { afterEach, describe, expect, it, vi } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { compilePlan, compileTenant, type Tenant } from '../../src/tenants/model.js';
import { createClusters, type Clusters } from '../../src/upstream/clusters.js';
import { buildRing, ringLookup, ringShares, type RingHash } from '../../src/upstream/ring.js';
import { testConfig } from '../helpers/edge.js';

const B = ['http://10.0.0.1:6632', 'http://10.0.0.2:6632', 'http://10.0.0.3:6632'];
const RING = buildRing(B);
const ownerOf = (key: string, skip: readonly number[] = []) => B[ringLookup(RING, key, (b) => !skip.includes(b))];

const PLAN = compilePlan('free', {
  features: [],
  limits: { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1 << 20, maxBatch: 1000 },
  quotas: { messagesPerMonth: 1e6, ingressBytesPerMonth: 1e10 },
  storageBytes: 1e9,
});

function tenant(id: string, brokers: readonly string[] = B, boundedLoadFactor: number | null = null): Tenant {
  return compileTenant(id, { status: 'active', plan: 'free', hosts: [], brokers: [...brokers], cors: { origins: [] }, boundedLoadFactor }, PLAN);
}

/** Lane keys whose ring owner is broker `b`. */
function lanesOf(b: number, count: number): string[] {
  const out: string[] = [];
  for (let i = 0; out.length < count; i++) if (ownerOf(`orders:acct-${i}:billing`) === B[b]) out.push(`orders:acct-${i}:billing`);
  return out;
}

const made: Clusters[] = [];
/** Clusters with a scripted probe: `up` says which brokers answer their health checks. */
function clusters(opts: { downAfter?: number; upAfter?: number; ringHash?: RingHash } = {}) {
  const up = new Map<string, boolean>();
  const probed: string[] = [];
  const c = createClusters(
    {
      healthIntervalMs: 20,
      healthTimeoutMs: 100,
      downAfter: opts.downAfter ?? 2,
      upAfter: opts.upAfter ?? 2,
      ...(opts.ringHash ? { ringHash: opts.ringHash } : {}),
    },
    {
      log: silentLogger(),
      probe: async (url) => {
        probed.push(url);
        return up.get(url) ?? true;
      },
    },
  );
  made.push(c);
  return { c, up, probed };
}

afterEach(async () => {
  await Promise.all(made.splice(0).map((c) => c.close()));
});

describe('clusters: lanes on the ring', () => {
  it('keeps each lane on its ring broker over 1,000 picks', () => {
    const { c } = clusters();
    const t = tenant('t1');
    const keys = ['orders:acct-42:billing', 'orders:*:__QUEUE_MODE__', 'orders:Default', 'billing:invoice:*'];
    for (const key of keys) {
      const expected = ownerOf(key);
      for (let i = 0; i < 1000; i++) expect(c.pick(t, key)).toBe(expected);
    }
  });

  it('moves a down broker’s lanes to the ring’s next broker and gives them back on recovery', async () => {
    const { c, up } = clusters({ upAfter: 2 });
    const t = tenant('t1');
    const mine = lanesOf(0, 20);
    const others = [...lanesOf(1, 10), ...lanesOf(2, 10)];
    for (const k of mine) expect(c.pick(t, k)).toBe(B[0]);

    up.set(B[0]!, false);
    c.reportFailure(B[0]!, 'connect');
    for (const k of mine) expect(c.pick(t, k)).toBe(ownerOf(k, [0]));
    for (const k of others) expect(c.pick(t, k)).toBe(ownerOf(k));

    up.set(B[0]!, true);
    c.start([t]);
    await vi.waitFor(() => expect(c.snapshot([t])[0]!.brokers[0]!.healthy).toBe(true), { timeout: 3000 });
    for (const k of mine) expect(c.pick(t, k)).toBe(B[0]);
    for (const k of others) expect(c.pick(t, k)).toBe(ownerOf(k));
  });

  it('marks a broker down on 5xx answers only once its health checks fail too', async () => {
    const { c, up, probed } = clusters({ downAfter: 2 });
    const t = tenant('t1');
    const [k] = lanesOf(1, 1);
    c.pick(t, k!);
    for (let i = 0; i < 5; i++) c.reportFailure(B[1]!, 'status5xx');
    expect(probed).toEqual([B[1]]);
    // The check passed: the lane stays.
    await new Promise((resolve) => setImmediate(resolve));
    expect(c.pick(t, k!)).toBe(B[1]);
    up.set(B[1]!, false);
    // Further 5xx answers start checks (one per healthTimeoutMs) that now fail: two of them mark it down.
    await vi.waitFor(
      () => {
        c.reportFailure(B[1]!, 'status5xx');
        expect(c.pick(t, k!)).toBe(ownerOf(k!, [1]));
      },
      { timeout: 3000, interval: 20 },
    );
  });

  it('skips excluded brokers along the ring, and has none left when all are excluded', () => {
    const { c } = clusters();
    const t = tenant('t1');
    const key = 'orders:acct-42:billing';
    const first = ringLookup(RING, key, () => true);
    const second = ringLookup(RING, key, (b) => b !== first);
    const third = ringLookup(RING, key, (b) => b !== first && b !== second);
    expect(c.pick(t, key, new Set([B[first]!]))).toBe(B[second]);
    expect(c.pick(t, key, new Set([B[first]!, B[second]!]))).toBe(B[third]);
    expect(c.pick(t, key, new Set(B))).toBeUndefined();
    expect(c.pick(t, null, new Set([B[0]!, B[2]!]))).toBe(B[1]);
  });

  it('has no broker when all are down', () => {
    const { c } = clusters();
    const t = tenant('t1');
    c.pick(t, null);
    for (const b of B) c.reportFailure(b, 'connect');
    expect(c.pick(t, 'orders:acct-42:billing')).toBeUndefined();
    expect(c.pick(t, null)).toBeUndefined();
  });

  it('spreads null lanes over the healthy brokers', () => {
    const { c } = clusters();
    const t = tenant('t1');
    const count = (n: number) => {
      const seen = new Map<string, number>();
      for (let i = 0; i < n; i++) {
        const u = c.pick(t, null)!;
        seen.set(u, (seen.get(u) ?? 0) + 1);
      }
      return seen;
    };
    expect(count(300)).toEqual(new Map(B.map((b) => [b, 100])));
    c.reportFailure(B[1]!, 'connect');
    expect(count(300)).toEqual(
      new Map([
        [B[0]!, 150],
        [B[2]!, 150],
      ]),
    );
  });
});

describe('clusters: bounded loads', () => {
  it('skips a broker over ceil(c × (in-flight + 1) / healthy) and walks on', () => {
    const { c } = clusters();
    const bounded = tenant('t1', B, 1.25);
    const free = tenant('t2', B, null);
    const key = lanesOf(0, 1)[0]!;
    c.pick(bounded, key);
    c.begin(B[0]!);
    // 1 in flight: cap ceil(1.25 × 2 / 3) = 1, and B0 would hold 2.
    expect(c.pick(bounded, key)).toBe(ownerOf(key, [0]));
    // Off without a factor, even for the same broker URLs.
    expect(c.pick(free, key)).toBe(B[0]);
    c.end(B[0]!);
    expect(c.pick(bounded, key)).toBe(B[0]);
  });

  it('keeps one hot lane’s long polls within the bound on every broker', () => {
    const { c } = clusters();
    const t = tenant('t1', B, 1.25);
    const key = 'orders:acct-42:billing';
    for (let i = 0; i < 300; i++) c.begin(c.pick(t, key)!);
    const inflight = c.snapshot([t])[0]!.brokers.map((b) => b.inflight);
    expect(inflight.reduce((a, b) => a + b, 0)).toBe(300);
    for (const n of inflight) expect(n).toBeLessThanOrEqual(Math.ceil((1.25 * 300) / 3));
    // The lane's own broker is filled to the bound first.
    expect(inflight[B.indexOf(ownerOf(key)!)]).toBe(125);
  });

  it('still answers a retry when exclusion leaves only brokers over the bound', () => {
    const { c } = clusters();
    const t = tenant('t1', B, 1.25);
    const key = lanesOf(0, 1)[0]!;
    c.pick(t, key);
    for (let i = 0; i < 5; i++) c.begin(B[0]!);
    expect(c.pick(t, key, new Set([B[1]!, B[2]!]))).toBe(B[0]);
  });

  it('never counts in-flight below zero', () => {
    const { c } = clusters();
    const t = tenant('t1');
    c.pick(t, null);
    c.end(B[0]!);
    c.begin(B[0]!);
    expect(c.snapshot([t])[0]!.brokers[0]!.inflight).toBe(1);
  });
});

describe('clusters: leases', () => {
  it('sends a learnt lease back to its broker, for the tenant that lists it only', () => {
    const { c } = clusters();
    const t1 = tenant('t1');
    const t2 = tenant('t2', ['http://other:6632']);
    c.pick(t1, null);
    c.learnLease('lease-1', B[2]!);
    expect(c.brokerForLease(t1, 'lease-1')).toBe(B[2]);
    expect(c.brokerForLease(t2, 'lease-1')).toBeUndefined();
    expect(c.brokerForLease(t1, 'lease-unknown')).toBeUndefined();
    expect(c.brokerForLease(t1, 'lease-1', new Set([B[2]!]))).toBeUndefined();
    c.reportFailure(B[2]!, 'connect');
    expect(c.brokerForLease(t1, 'lease-1')).toBeUndefined();
  });
});

describe('clusters: ring hash', () => {
  it('places lanes on the avalanche ring when upstream.ringHash says so, and shows it', () => {
    const { c } = clusters({ ringHash: 'avalanche' });
    const t = tenant('t1');
    const avalanche = buildRing(B, 'avalanche');
    let differs = 0;
    for (let i = 0; i < 200; i++) {
      const key = `orders:acct-${i}:billing`;
      const expected = B[ringLookup(avalanche, key, () => true)];
      expect(c.pick(t, key)).toBe(expected);
      if (expected !== ownerOf(key)) differs++;
    }
    // Two thirds of lanes are expected elsewhere than on the SDK ring: the hash really changed.
    expect(differs).toBeGreaterThan(60);
    const [snap] = c.snapshot([t]);
    expect(snap!.ringHash).toBe('avalanche');
    expect(snap!.brokers.map((b) => b.keyShare)).toEqual(ringShares(avalanche));
  });

  it('defaults to the SDK ring, in the selector and in the config', () => {
    expect(clusters().c.snapshot([tenant('t1')])[0]!.ringHash).toBe('sdk');
    expect(testConfig(B).upstream.ringHash).toBe('sdk');
    expect(testConfig(B, { upstream: { ringHash: 'avalanche' } }).upstream.ringHash).toBe('avalanche');
    expect(() => testConfig(B, { upstream: { ringHash: 'md5' } })).toThrow(/ringHash/);
  });
});

describe('clusters: lifecycle and snapshot', () => {
  it('reports each tenant’s brokers with health, load, picks and ring share', () => {
    const { c } = clusters();
    const t1 = tenant('t1', B, 1.5);
    const t2 = tenant('t2', [B[0]!]);
    c.start([t1, t2]);
    const key = lanesOf(2, 1)[0]!;
    c.pick(t1, key);
    c.pick(t1, key);
    c.begin(B[2]!);
    c.pick(t2, null);
    c.reportFailure(B[1]!, 'connect');
    const [s1, s2] = c.snapshot([t1, t2]);
    expect(s1).toMatchObject({ tenant: 't1', boundedLoadFactor: 1.5 });
    expect(s1!.brokers.map((b) => [b.url, b.healthy, b.inflight, b.picks])).toEqual([
      [B[0], true, 0, 1],
      [B[1], false, 0, 0],
      [B[2], true, 1, 2],
    ]);
    expect(s1!.brokers.reduce((a, b) => a + b.keyShare, 0)).toBeCloseTo(1, 9);
    expect(s1!.brokers[1]!.lastChange).toMatchObject({ url: B[1], healthy: false, reason: 'connect failure' });
    expect(s1!.brokers[0]!.lastChange).toBeNull();
    // Counters belong to the broker URL, shared by the tenants that list it.
    expect(s2).toEqual({
      tenant: 't2',
      boundedLoadFactor: null,
      ringHash: 'sdk',
      brokers: [{ url: B[0], healthy: true, inflight: 0, picks: 1, keyShare: 1, lastChange: null }],
    });
  });

  it('checks every broker of the started tenants, and stops checking brokers dropped by sync', async () => {
    const { c, probed } = clusters();
    const t1 = tenant('t1', [B[0]!, B[1]!]);
    const t2 = tenant('t2', [B[2]!]);
    c.start([t1, t2]);
    await vi.waitFor(() => expect(new Set(probed)).toEqual(new Set(B)), { timeout: 3000 });
    // sync() untracks B[2] at once, and a probe is recorded when it starts: none of B[2] may follow.
    c.sync([t1]);
    const after = probed.length;
    await vi.waitFor(() => expect(probed.length).toBeGreaterThanOrEqual(after + 4), { timeout: 3000 });
    expect(probed.slice(after)).not.toContain(B[2]);
    // A tenant seen after start is tracked on its first pick.
    const t3 = tenant('t3', ['http://10.0.0.9:6632']);
    expect(c.pick(t3, 'x')).toBe('http://10.0.0.9:6632');
    await vi.waitFor(() => expect(probed).toContain('http://10.0.0.9:6632'), { timeout: 3000 });
  });

  it('tracks the tenants of a one-shot iterator (the directory hands over its map values)', async () => {
    const { c, probed } = clusters();
    c.start(new Map([['t1', tenant('t1', [B[0]!])]]).values());
    await vi.waitFor(() => expect(probed).toContain(B[0]), { timeout: 3000 });
  });

  it('a broker removed from a tenant is no longer probed nor picked, even by a request holding the tenant from before', async () => {
    const { c, probed } = clusters();
    const before = tenant('t1', [B[0]!, B[1]!]);
    c.start([before]);
    c.pick(before, 'k');
    await vi.waitFor(() => expect(new Set(probed)).toEqual(new Set([B[0], B[1]])), { timeout: 3000 });
    // The admin API removes B[1]: the directory builds a new tenant object and syncs.
    const after = tenant('t1', [B[0]!]);
    c.sync([after]);
    // A request still holding the old object picks B[0] only, and does not re-track B[1].
    for (const key of lanesOf(1, 20)) expect(c.pick(before, key)).toBe(B[0]);
    expect(c.snapshot([before])[0]!.brokers.map((b) => [b.url, b.healthy])).toEqual([
      [B[0], true],
      [B[1], false],
    ]);
    const from = probed.length;
    await vi.waitFor(() => expect(probed.slice(from).filter((u) => u === B[0]).length).toBeGreaterThanOrEqual(3), { timeout: 3000 });
    expect(probed.slice(from)).not.toContain(B[1]);
    expect(c.snapshot([after])).toEqual([expect.objectContaining({ brokers: [expect.objectContaining({ url: B[0], healthy: true, keyShare: 1 })] })]);
    // The old object still follows the health of the broker it shares with the current one.
    c.reportFailure(B[0]!, 'connect');
    expect(c.pick(before, 'k')).toBeUndefined();
    // A later sync that lists B[1] again tracks it again.
    c.sync([tenant('t1', [B[0]!, B[1]!])]);
    const again = probed.length;
    await vi.waitFor(() => expect(probed.slice(again)).toContain(B[1]), { timeout: 3000 });
  });
});

describe('clusters: following the directory by URL', () => {
  const NEW = 'http://10.0.0.7:6632';

  it('tracks and checks a URL the directory adds, before any tenant listing it is picked', async () => {
    const { c, probed } = clusters();
    c.start([tenant('t1', [B[0]!])]);
    c.follow({ added: [NEW], removed: [] });
    expect(c.brokers().map((b) => b.url)).toEqual([B[0], NEW]);
    await vi.waitFor(() => expect(probed).toContain(NEW), { timeout: 3000 });
    expect(c.pick(tenant('t2', [NEW]), 'k')).toBe(NEW);
  });

  it('a URL removed with its last tenant is no longer checked, counted or picked; one another tenant lists stays', async () => {
    const { c, probed } = clusters();
    const keeps = tenant('t1', [B[0]!]);
    const leaves = tenant('t2', [B[0]!, B[1]!]);
    c.start([keeps, leaves]);
    c.pick(leaves, 'k');
    await vi.waitFor(() => expect(new Set(probed)).toEqual(new Set([B[0], B[1]])), { timeout: 3000 });
    // t2 goes: B[1] loses its last tenant, B[0] keeps t1.
    c.follow({ added: [], removed: [B[1]!] });
    expect(c.brokers()).toEqual([{ url: B[0], healthy: true, inflight: 0 }]);
    const from = probed.length;
    await vi.waitFor(() => expect(probed.slice(from).filter((u) => u === B[0]).length).toBeGreaterThanOrEqual(3), { timeout: 3000 });
    expect(probed.slice(from)).not.toContain(B[1]);
    // A request holding t2 from before (its entry made before, or first seen now) sees B[1] down and does not track it again.
    const unseen = tenant('t2', [B[1]!, B[0]!]);
    for (const key of lanesOf(1, 20)) {
      expect(c.pick(leaves, key)).toBe(B[0]);
      expect(c.pick(unseen, key)).toBe(B[0]);
    }
    expect(c.reachable(tenant('t3', [B[1]!]))).toBe(false);
    c.learnLease('lease-b1', B[1]!);
    expect(c.brokerForLease(leaves, 'lease-b1')).toBeUndefined();
    expect(c.brokers().map((b) => b.url)).toEqual([B[0]]);
    expect(c.pick(keeps, 'k')).toBe(B[0]);
  });

  it('a URL removed and added again is live again for a tenant object the directory lends anew', () => {
    const { c } = clusters();
    const t = tenant('t1', [B[0]!, B[1]!]);
    c.start([t]);
    c.pick(t, null);
    c.follow({ added: [], removed: [B[1]!] });
    expect(c.snapshot([t])[0]!.brokers.map((b) => b.healthy)).toEqual([true, false]);
    c.follow({ added: [B[1]!], removed: [] });
    expect(c.snapshot([t])[0]!.brokers.map((b) => b.healthy)).toEqual([true, true]);
    c.begin(c.pick(t, lanesOf(1, 1)[0]!)!);
    expect(c.brokers()).toEqual([
      { url: B[0], healthy: true, inflight: 0 },
      { url: B[1], healthy: true, inflight: 1 },
    ]);
  });

  it('tells readiness whether any tracked broker is healthy, without the tenants', () => {
    const { c } = clusters();
    c.start([tenant('t1', [B[0]!]), tenant('t2', [B[1]!])]);
    expect(c.brokers().some((b) => b.healthy)).toBe(true);
    c.reportFailure(B[0]!, 'connect');
    expect(c.brokers().some((b) => b.healthy)).toBe(true);
    c.reportFailure(B[1]!, 'connect');
    expect(c.brokers().some((b) => b.healthy)).toBe(false);
    c.follow({ added: [B[2]!], removed: [B[0]!, B[1]!] });
    expect(c.brokers()).toEqual([{ url: B[2], healthy: true, inflight: 0 }]);
  });
});

describe('clusters: a URL removed and added again with requests still in flight', () => {
  it('counts the requests begun before the removal until they end, not the new ones they would hide', () => {
    const { c } = clusters();
    c.start([tenant('t1', [B[0]!])]);
    c.begin(B[0]!);
    c.follow({ added: [], removed: [B[0]!] });
    c.follow({ added: [B[0]!], removed: [] });
    c.begin(B[0]!);
    // The request from before the removal ends: the one begun since is still in flight.
    c.end(B[0]!);
    expect(c.brokers()).toEqual([{ url: B[0], healthy: true, inflight: 1 }]);
    c.end(B[0]!);
    expect(c.brokers()).toEqual([{ url: B[0], healthy: true, inflight: 0 }]);
  });
});
