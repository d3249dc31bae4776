import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Breaker } from '../../src/limits/breaker.js';
import { rateLimitField, rateLimitPolicy } from '../../src/limits/headers.js';
import { storageVerdict } from '../../src/tenants/storage.js';
import {
  classifyRefusal,
  compileLimitPlan,
  DIM_MESSAGES,
  DIM_MONTH_BYTES,
  DIM_MONTH_MESSAGES,
  DIM_PARKED,
  DIM_REQUESTS,
  limitVerdict,
  monthWindow,
  type LimitCost,
  type LimitPlan,
  type LimitState,
} from '../../src/limits/verdict.js';
import type { Limits, Quotas } from '../../src/tenants/model.js';

const LIMITS: Limits = {
  requestsPerSec: 0.5,
  requestBurst: 3,
  messagesPerSec: 100,
  messageBurst: 1000,
  parkedPolls: 2,
  maxPayloadBytes: 1 << 20,
  maxBatch: 1000,
};
const QUOTAS: Quotas = { messagesPerMonth: 1000, ingressBytesPerMonth: 10_000 };
const EMPTY: LimitState = { requestTat: 0, messageTat: 0, parked: 0, monthMessages: 0, monthBytes: 0 };
const NOTHING: LimitCost = { messages: 0, ingressBytes: 0, parkedPoll: false };
const T0 = Date.parse('2026-06-01T12:00:00Z');

/** Runs admits in order, carrying the stored state like a store does. */
function run(plan: LimitPlan, steps: { at: number; cost?: Partial<LimitCost> }[], state = EMPTY) {
  return steps.map(({ at, cost }) => {
    const v = limitVerdict(state, plan, { ...NOTHING, ...cost }, at);
    state = v.next;
    return v;
  });
}

describe('limitVerdict', () => {
  const plan = compileLimitPlan(LIMITS, QUOTAS);

  it('admits the burst, refuses the next with the wait until one token is back', () => {
    const vs = run(plan, [{ at: T0 }, { at: T0 }, { at: T0 }, { at: T0 }]);
    expect(vs.map((v) => v.refused)).toEqual([0, 0, 0, DIM_REQUESTS]);
    expect(vs.map((v) => v.remaining)).toEqual([2, 1, 0, 0]);
    expect(vs[3]!.requestWaitMs).toBe(2000);
    expect(classifyRefusal(vs[3]!.refused, vs[3]!.requestWaitMs, 0, T0, 0)).toEqual({ code: 'rate_limited', retryAfterSec: 2 });
    // Full again 3 tokens × 2 s after the burst.
    expect(vs[2]!.resetMs).toBe(6000);
  });

  it('passes again exactly when Retry-After says', () => {
    const [a, b, c] = run(plan, [{ at: T0 }, { at: T0 }, { at: T0 }]);
    const s = c!.next;
    expect(limitVerdict(s, plan, NOTHING, T0 + 1999).refused).toBe(DIM_REQUESTS);
    expect(limitVerdict(s, plan, NOTHING, T0 + 2000).refused).toBe(0);
    expect([a!.refused, b!.refused]).toEqual([0, 0]);
  });

  it('drains the message bucket 100 at a time and refuses the 11th push for one second', () => {
    const fast = compileLimitPlan({ ...LIMITS, requestsPerSec: 1000, requestBurst: 1000 }, { messagesPerMonth: 0, ingressBytesPerMonth: 0 });
    const vs = run(
      fast,
      Array.from({ length: 11 }, () => ({ at: T0, cost: { messages: 100 } })),
    );
    expect(vs.slice(0, 10).every((v) => v.refused === 0)).toBe(true);
    expect(vs[10]!.refused).toBe(DIM_MESSAGES);
    expect(vs[10]!.messageWaitMs).toBeCloseTo(1000, 6);
    expect(classifyRefusal(vs[10]!.refused, 0, vs[10]!.messageWaitMs, T0, 0).retryAfterSec).toBe(1);
  });

  it('lets a push larger than the burst through on a full bucket, as debt', () => {
    const fast = compileLimitPlan({ ...LIMITS, requestsPerSec: 1000, requestBurst: 1000 }, { messagesPerMonth: 0, ingressBytesPerMonth: 0 });
    const [big, next] = run(fast, [
      { at: T0, cost: { messages: 1500 } },
      { at: T0 + 10_000, cost: { messages: 1 } },
    ]);
    expect(big!.refused).toBe(0);
    // 1500 from a bucket of 1000 leaves 500 of debt: nothing more passes for 5 s (at 100/s).
    expect(next!.refused).toBe(0);
    expect(limitVerdict(big!.next, fast, { ...NOTHING, messages: 1 }, T0 + 5_000).refused).toBe(DIM_MESSAGES);
  });

  it('consumes nothing on any dimension when one refuses', () => {
    const state: LimitState = { ...EMPTY, monthMessages: 950 };
    const v = limitVerdict(state, plan, { messages: 100, ingressBytes: 10, parkedPoll: true }, T0);
    expect(v.refused).toBe(DIM_MONTH_MESSAGES);
    expect(v.next).toBe(state);
  });

  it('counts every refusing dimension and names a quota first', () => {
    const state: LimitState = { requestTat: T0 + 6000, messageTat: 0, parked: 2, monthMessages: 1000, monthBytes: 10_000 };
    const v = limitVerdict(state, plan, { messages: 1, ingressBytes: 1, parkedPoll: true }, T0);
    expect(v.refused).toBe(DIM_REQUESTS | DIM_PARKED | DIM_MONTH_MESSAGES | DIM_MONTH_BYTES);
    expect(classifyRefusal(v.refused, v.requestWaitMs, 0, T0, monthWindow(T0).endMs).code).toBe('quota_exceeded');
  });

  it('quota Retry-After is the seconds to the next UTC month', () => {
    const now = Date.parse('2026-12-31T23:59:30Z');
    const w = monthWindow(now);
    expect(w).toMatchObject({ id: '202612', endMs: Date.parse('2027-01-01T00:00:00Z') });
    const v = limitVerdict({ ...EMPTY, monthMessages: 1000 }, plan, { ...NOTHING, messages: 1 }, now);
    expect(classifyRefusal(v.refused, 0, 0, now, w.endMs)).toEqual({ code: 'quota_exceeded', retryAfterSec: 30 });
    expect(monthWindow(Date.parse('2027-01-01T00:00:00Z')).id).toBe('202701');
  });

  it('treats a quota of 0 as unlimited and checks a quota only for requests that add to it', () => {
    const unlimited = compileLimitPlan(LIMITS, { messagesPerMonth: 0, ingressBytesPerMonth: 0 });
    expect(limitVerdict({ ...EMPTY, monthMessages: 1e12, monthBytes: 1e15 }, unlimited, { messages: 5, ingressBytes: 5, parkedPoll: false }, T0).refused).toBe(
      0,
    );
    // A pop (no messages, no body) still passes when both quotas are spent: consumers can drain.
    expect(limitVerdict({ ...EMPTY, monthMessages: 1000, monthBytes: 10_000 }, plan, NOTHING, T0).refused).toBe(0);
    expect(limitVerdict({ ...EMPTY, monthBytes: 9_990 }, plan, { ...NOTHING, ingressBytes: 11 }, T0).refused).toBe(DIM_MONTH_BYTES);
  });

  it('refuses a parked poll once every slot is taken', () => {
    expect(limitVerdict({ ...EMPTY, parked: 1 }, plan, { ...NOTHING, parkedPoll: true }, T0).refused).toBe(0);
    const v = limitVerdict({ ...EMPTY, parked: 2 }, plan, { ...NOTHING, parkedPoll: true }, T0);
    expect(v.refused).toBe(DIM_PARKED);
    expect(classifyRefusal(v.refused, 0, 0, T0, 0)).toEqual({ code: 'rate_limited', retryAfterSec: 1 });
  });

  it('never admits more than burst + rate × elapsed (property)', () => {
    const p = compileLimitPlan({ ...LIMITS, requestsPerSec: 10, requestBurst: 5 }, QUOTAS);
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 400 }), { minLength: 1, maxLength: 200 }), (gaps) => {
        let at = T0;
        const steps = gaps.map((g) => {
          at += g;
          return { at };
        });
        const admitted = run(p, steps).filter((v) => v.refused === 0).length;
        return admitted <= 5 + Math.floor(((at - T0) * 10) / 1000);
      }),
    );
  });
});

describe('compileLimitPlan', () => {
  it('divides rates, bursts and slots across instances and leaves quotas to Redis', () => {
    const p = compileLimitPlan({ ...LIMITS, requestsPerSec: 50, requestBurst: 100, parkedPolls: 3 }, QUOTAS, 4);
    expect(p.requestIntervalMs).toBe(80);
    expect(p.requestBurst).toBe(25);
    expect(p.parkedPolls).toBe(1);
    expect(p.messagesPerMonth).toBe(0);
    expect(compileLimitPlan(LIMITS, QUOTAS, 1).messagesPerMonth).toBe(1000);
  });
});

describe('RateLimit headers', () => {
  it('describes the request bucket as quota per window (structured fields)', () => {
    const p = compileLimitPlan({ ...LIMITS, requestsPerSec: 50, requestBurst: 100 }, QUOTAS);
    expect(rateLimitPolicy(p)).toBe('"requests";q=100;w=2');
    expect(rateLimitField(7, 1201)).toBe('"requests";r=7;t=2');
  });
});

describe('storageVerdict', () => {
  it.each([
    [undefined, 1000, false, false],
    [999, 1000, false, false],
    [1000, 1000, false, true],
    [950, 1000, true, true],
    [900, 1000, true, true],
    [899, 1000, true, false],
    [950, 1000, false, false],
    [10 ** 12, 0, true, false],
  ])('used %s of %s, blocked before %s → %s', (used, plan, before, expected) => {
    expect(storageVerdict(used, plan, before)).toBe(expected);
  });
});

describe('Breaker', () => {
  it('opens on failure, lets one probe through after the cool-down, closes on success', () => {
    let now = 0;
    const b = new Breaker(1000, () => now);
    expect(b.allow()).toBe(true);
    b.failure();
    expect([b.state(), b.allow()]).toEqual(['open', false]);
    now = 999;
    expect(b.allow()).toBe(false);
    now = 1000;
    expect(b.allow()).toBe(true);
    expect([b.state(), b.allow()]).toEqual(['half-open', false]);
    b.failure();
    expect(b.state()).toBe('open');
    now = 2000;
    expect(b.allow()).toBe(true);
    b.success();
    expect([b.state(), b.allow()]).toEqual(['closed', true]);
  });
});

describe('monthWindow', () => {
  it('names the UTC month of each instant, across boundaries in both directions (it remembers the last month)', () => {
    const lastMsOfDec = Date.UTC(2026, 11, 31, 23, 59, 59, 999);
    const newYear = Date.UTC(2027, 0, 1);
    const seen = [lastMsOfDec, newYear, lastMsOfDec, Date.UTC(2026, 11, 1), Date.UTC(2026, 11, 1) - 1, Date.UTC(2024, 1, 29, 12)].map((t) => monthWindow(t));
    expect(seen.map((m) => m.id)).toEqual(['202612', '202701', '202612', '202612', '202611', '202402']);
    expect(seen.map((m) => m.endMs)).toEqual([newYear, Date.UTC(2027, 1, 1), newYear, newYear, Date.UTC(2026, 11, 1), Date.UTC(2024, 2, 1)]);
  });
});
