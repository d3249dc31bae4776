/** Plan values are validated to ranges the limiter handles, in the file and in admin-written records (both use planSchema). */
import { describe, expect, it } from 'vitest';
import { planSchema, tenantSchema } from '../../src/config/schema.js';

const limits = { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1048576, maxBatch: 1000 };
const plan = (over: Record<string, unknown>) => ({ limits: { ...limits, ...over }, quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 }, storageBytes: 0 });

describe('plan value ranges', () => {
  it('accepts the defaults and the extremes of each range', () => {
    expect(planSchema.safeParse(plan({})).success).toBe(true);
    expect(planSchema.safeParse(plan({ requestsPerSec: 0.001, requestBurst: 1e9, messagesPerSec: 1e9, messageBurst: 1 })).success).toBe(true);
  });

  it.each([
    ['requestsPerSec', 1e-300],
    ['requestsPerSec', 1e300],
    ['messagesPerSec', 1e-9],
    ['messagesPerSec', Infinity],
    ['requestBurst', 1e12],
    ['messageBurst', 0],
    ['parkedPolls', 1e9],
    ['maxPayloadBytes', 2 ** 40],
    ['maxBatch', 1e9],
  ])('refuses %s: %d', (key, value) => {
    expect(planSchema.safeParse(plan({ [key]: value })).success).toBe(false);
  });

  it("bounds a tenant's limit overrides the same way", () => {
    const t = { plan: 'p', brokers: ['http://127.0.0.1:6632'] };
    expect(tenantSchema.safeParse({ ...t, limits: { requestsPerSec: 1e-300 } }).success).toBe(false);
    expect(tenantSchema.safeParse({ ...t, limits: { requestsPerSec: 5 } }).success).toBe(true);
  });
});
