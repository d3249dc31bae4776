/**
 * The two limiter stores decide alike: random admit sequences (plans, costs, parked polls and
 * their releases, clock steps across a month end) run through the in-memory store (limitVerdict
 * in TypeScript) and the Redis store (ADMIT_LUA on the shared Redis, under a unique prefix), on
 * one explicit clock, and every decision must match: refused mask, remaining, waits, reset, and
 * the refusal code and Retry-After a client would see.
 */
import fc from 'fast-check';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryLimitStore } from '../../src/limits/memory-store.js';
import { RedisLimitStore } from '../../src/limits/redis-store.js';
import { classifyRefusal, compileLimitPlan, monthWindow, type Decision, type LimitCost } from '../../src/limits/verdict.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';

const prefix = uniquePrefix();
let redis: Redis;

beforeAll(async () => {
  redis = await connectTest(SHARED_REDIS_URL, 2000);
});
afterAll(async () => {
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

const SLOT_TTL_MS = 60_000;

const planArb = fc.record({
  requestsPerSec: fc.constantFrom(0.25, 0.5, 1, 3, 7, 1000),
  requestBurst: fc.integer({ min: 1, max: 5 }),
  messagesPerSec: fc.constantFrom(1, 3, 10, 100),
  messageBurst: fc.integer({ min: 1, max: 50 }),
  parkedPolls: fc.integer({ min: 1, max: 3 }),
  messagesPerMonth: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 200 })),
  ingressBytesPerMonth: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 3000 })),
});

const stepArb = fc.record({
  // Often 0 (same instant), sometimes a fraction of an interval, sometimes long enough to refill.
  dtMs: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 400 }), fc.integer({ min: 400, max: 5000 }), fc.double({ min: 0, max: 2000, noNaN: true })),
  messages: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 80 })),
  ingressBytes: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 800 })),
  parkedPoll: fc.boolean(),
  /** Release the oldest slot still held before this admit. */
  release: fc.boolean(),
});

/** Mid-month, and two seconds before a month ends (the quotas restart in the next month's keys). */
const startArb = fc.constantFrom(Date.UTC(2026, 5, 14, 12), Date.UTC(2026, 5, 30, 23, 59, 58));

let run = 0;

describe('limiter stores: TypeScript verdict vs Lua script', () => {
  it('decide every admit of random sequences identically', async () => {
    await fc.assert(
      fc.asyncProperty(planArb, startArb, fc.array(stepArb, { minLength: 1, maxLength: 20 }), async (p, start, steps) => {
        const plan = compileLimitPlan(
          {
            requestsPerSec: p.requestsPerSec,
            requestBurst: p.requestBurst,
            messagesPerSec: p.messagesPerSec,
            messageBurst: p.messageBurst,
            parkedPolls: p.parkedPolls,
            maxPayloadBytes: 1 << 20,
            maxBatch: 1000,
          },
          { messagesPerMonth: p.messagesPerMonth, ingressBytesPerMonth: p.ingressBytesPerMonth },
        );
        const tenant = `diff-${run++}`;
        const memory = new MemoryLimitStore();
        const shared = new RedisLimitStore(redis, prefix);
        const held: string[] = [];
        const realStart = Date.now();
        const pairs: { step: number; now: number; ts: Decision; lua: Decision }[] = [];
        let offset = 0;
        for (const [i, s] of steps.entries()) {
          // The explicit clock runs the real time elapsed plus the generated steps: Redis expires
          // keys (bucket TATs, the parked ZSET) by its own clock, so a clock slower than real time
          // would find keys gone that it still needs, on a loaded machine.
          offset += s.dtMs;
          const now = start + offset + (Date.now() - realStart);
          if (s.release && held.length > 0) {
            const slot = held.shift()!;
            memory.release(tenant, slot);
            shared.release(tenant, slot);
          }
          const cost: LimitCost = { messages: s.messages, ingressBytes: s.ingressBytes, parkedPoll: s.parkedPoll };
          const month = monthWindow(now);
          const slot = `slot-${i}`;
          const ts = memory.admit(tenant, plan, cost, now, month.id, slot, SLOT_TTL_MS);
          const lua = await shared.admit(tenant, plan, cost, now, month, slot, SLOT_TTL_MS);
          if (ts.refused === 0 && s.parkedPoll) held.push(slot);
          pairs.push({ step: i, now, ts, lua });
        }
        for (const { step, now: at, ts, lua } of pairs) {
          const where = `step ${step} at +${at - start} ms`;
          expect(lua.refused, where).toBe(ts.refused);
          expect(lua.remaining, where).toBe(ts.remaining);
          // Lua hands floats back through tostring (14 significant digits).
          expect(lua.requestWaitMs, where).toBeCloseTo(ts.requestWaitMs, 6);
          expect(lua.messageWaitMs, where).toBeCloseTo(ts.messageWaitMs, 6);
          expect(lua.resetMs, where).toBeCloseTo(ts.resetMs, 6);
          if (ts.refused !== 0) {
            const endMs = monthWindow(at).endMs;
            expect(classifyRefusal(lua.refused, lua.requestWaitMs, lua.messageWaitMs, at, endMs), where).toEqual(
              classifyRefusal(ts.refused, ts.requestWaitMs, ts.messageWaitMs, at, endMs),
            );
          }
        }
      }),
      {
        numRuns: 60,
        examples: [
          // A fractional clock reading: the script once failed on a fractional month-key TTL, halfway through its writes.
          [
            { requestsPerSec: 0.25, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, messagesPerMonth: 1, ingressBytesPerMonth: 0 },
            Date.UTC(2026, 5, 14, 12),
            [{ dtMs: 0.5, messages: 1, ingressBytes: 0, parkedPoll: false, release: false }],
          ],
        ],
      },
    );
  });

  it('decide the admits of one tenant sent in one turn (one script call) as the verdict decides them in order', async () => {
    await fc.assert(
      fc.asyncProperty(planArb, fc.array(stepArb, { minLength: 2, maxLength: 12 }), async (p, steps) => {
        const plan = compileLimitPlan(
          {
            requestsPerSec: p.requestsPerSec,
            requestBurst: p.requestBurst,
            messagesPerSec: p.messagesPerSec,
            messageBurst: p.messageBurst,
            parkedPolls: p.parkedPolls,
            maxPayloadBytes: 1 << 20,
            maxBatch: 1000,
          },
          { messagesPerMonth: p.messagesPerMonth, ingressBytesPerMonth: p.ingressBytesPerMonth },
        );
        const tenant = `diff-turn-${run++}`;
        const memory = new MemoryLimitStore();
        const shared = new RedisLimitStore(redis, prefix);
        const now = Date.now();
        const month = monthWindow(now);
        const costs: LimitCost[] = steps.map((s) => ({ messages: s.messages, ingressBytes: s.ingressBytes, parkedPoll: s.parkedPoll }));
        // Issued without awaiting: the store sends them in one EVALSHA.
        const lua = await Promise.all(costs.map((cost, i) => shared.admit(tenant, plan, cost, now, month, `slot-${i}`, SLOT_TTL_MS)));
        const ts = costs.map((cost, i) => memory.admit(tenant, plan, cost, now, month.id, `slot-${i}`, SLOT_TTL_MS));
        for (let i = 0; i < costs.length; i++) {
          expect(lua[i]!.refused, `admit ${i}`).toBe(ts[i]!.refused);
          expect(lua[i]!.remaining, `admit ${i}`).toBe(ts[i]!.remaining);
          expect(lua[i]!.resetMs, `admit ${i}`).toBeCloseTo(ts[i]!.resetMs, 6);
          expect(lua[i]!.messageWaitMs, `admit ${i}`).toBeCloseTo(ts[i]!.messageWaitMs, 6);
        }
      }),
      { numRuns: 40 },
    );
  });
});
