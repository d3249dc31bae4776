/**
 * The proxy's bookkeeping when sending throws before anything is sent (a bug, or a pool undici
 * refuses to open): the exchange still gets relayed() once, so its usage record is written, every
 * pool slot taken is given back and every broker's in-flight count is balanced. The broker choice
 * and the pools are stand-ins counting their calls; the proxy is the real one.
 */
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { createUpstreamProxy } from '../../src/upstream/proxy.js';

type Entry = 'at-once' | 'after-a-wait';

function harness(o: { brokers: string[]; entry: (broker: string) => Entry; usableAfterWait?: (broker: string) => boolean }) {
  const counts = { begin: 0, end: 0, enter: 0, leave: 0, relayed: 0 };
  const clusters = {
    brokerForLease: () => undefined,
    pick: (_t: unknown, _k: unknown, tried: ReadonlySet<string> | null) => o.brokers.find((b) => !tried?.has(b)),
    usable: (_t: unknown, b: string) => o.usableAfterWait?.(b) ?? true,
    begin: () => void counts.begin++,
    end: () => void counts.end++,
    reportFailure: () => {},
    reportSuccess: () => {},
    learnLease: () => {},
  };
  const pools = {
    tenantCap: 1,
    enter: (b: string) => {
      counts.enter++;
      return o.entry(b) === 'at-once' ? true : Promise.resolve(true);
    },
    leave: () => void counts.leave++,
    get: () => {
      throw new Error('invalid url');
    },
    drop: () => {},
  };
  const proxy = createUpstreamProxy({ clusters: clusters as never, pools: pools as never, log: silentLogger() });
  const exchange = {
    trace: null,
    broker: null,
    answerLost: false,
    status: 0,
    bytesOut: 0,
    bytesIn: 0,
    upstreamMs: 0,
    expectBody() {},
    relayed() {
      counts.relayed++;
    },
  };
  const res = { destroyed: false, headersSent: false, writableEnded: false, on() {}, removeListener() {} };
  // Tenancy-aware: its brokers are shared, so each attempt takes a slot of the tenant's share.
  const tenant = { id: 't', tenancyAwareBrokers: true };
  const req = {
    method: 'GET',
    path: '/',
    headers: {},
    body: null,
    lane: { key: null, leaseId: null },
    parked: false,
    learnsLease: false,
    capture: false,
    responseHeaders: null,
  };
  /** How forward() ended: 'threw' synchronously, 'rejected', or 'resolved'. */
  const run = (): Promise<'threw' | 'rejected' | 'resolved'> => {
    let forwarded: Promise<unknown>;
    try {
      forwarded = proxy.forward(res as never, exchange as never, tenant as never, req as never);
    } catch {
      return Promise.resolve('threw');
    }
    return forwarded.then(
      () => 'resolved' as const,
      () => 'rejected' as const,
    );
  };
  return { counts, run };
}

describe('upstream proxy: a send that throws', () => {
  it('with a slot taken at once: forward rejects (never throws), relayed() once, the slot and the in-flight count given back', async () => {
    const h = harness({ brokers: ['http://a'], entry: () => 'at-once' });
    expect(await h.run()).toBe('rejected');
    expect(h.counts).toMatchObject({ relayed: 1, begin: 1, end: 1, enter: 1, leave: 1 });
  });

  it('after a wait for a slot: the same', async () => {
    const h = harness({ brokers: ['http://a'], entry: () => 'after-a-wait' });
    expect(await h.run()).toBe('rejected');
    expect(h.counts).toMatchObject({ relayed: 1, begin: 1, end: 1, enter: 1, leave: 1 });
  });

  it("on the lane's next broker, the first one gone from the tenant during its wait: relayed() once over both attempts", async () => {
    const h = harness({
      brokers: ['http://a', 'http://b'],
      entry: (b) => (b === 'http://a' ? 'after-a-wait' : 'at-once'),
      usableAfterWait: (b) => b !== 'http://a',
    });
    expect(await h.run()).toBe('rejected');
    expect(h.counts).toMatchObject({ relayed: 1, begin: 1, end: 1, enter: 2, leave: 2 });
  });
});
