/**
 * The in-process limiter store: one instance without Redis, and failMode `local` while Redis
 * is away. It runs limitVerdict on plain state, so it decides exactly as the Lua script does.
 */
import { limitVerdict, type Decision, type LimitCost, type LimitPlan } from './verdict.js';

interface TenantCounters {
  requestTat: number;
  messageTat: number;
  /** Parked slot id → expiry (ms), as the Redis ZSET scores them. */
  readonly parked: Map<string, number>;
  month: string;
  monthMessages: number;
  monthBytes: number;
}

/** Per-tenant counters in memory; sync, so an admit needs no promise. */
export class MemoryLimitStore {
  readonly #tenants = new Map<string, TenantCounters>();

  /** Decides and, when admitted, takes from every dimension; `month` is the yyyymm id, `slot` the parked slot to take. */
  admit(tenantId: string, plan: LimitPlan, cost: LimitCost, now: number, month: string, slot: string, slotTtlMs: number): Decision {
    let c = this.#tenants.get(tenantId);
    if (!c) {
      c = { requestTat: 0, messageTat: 0, parked: new Map(), month, monthMessages: 0, monthBytes: 0 };
      this.#tenants.set(tenantId, c);
    }
    if (c.month !== month) {
      c.month = month;
      c.monthMessages = 0;
      c.monthBytes = 0;
    }
    if (cost.parkedPoll) {
      for (const [id, expiry] of c.parked) if (expiry <= now) c.parked.delete(id);
    }
    const v = limitVerdict(
      { requestTat: c.requestTat, messageTat: c.messageTat, parked: c.parked.size, monthMessages: c.monthMessages, monthBytes: c.monthBytes },
      plan,
      cost,
      now,
    );
    if (v.refused === 0) {
      c.requestTat = v.next.requestTat;
      c.messageTat = v.next.messageTat;
      c.monthMessages = v.next.monthMessages;
      c.monthBytes = v.next.monthBytes;
      if (cost.parkedPoll) c.parked.set(slot, now + slotTtlMs);
    }
    return v;
  }

  /** Gives a parked slot back; unknown slots are ignored. */
  release(tenantId: string, slot: string): void {
    this.#tenants.get(tenantId)?.parked.delete(slot);
  }
}
