/**
 * The limit decision (docs/limits.md), pure: one function checks every dimension of one admit and
 * takes from all of them only when all pass. The memory store calls it directly; the Lua script
 * in script.ts mirrors it line for line, so both stores behave identically.
 *
 * Rates use GCRA (a token bucket stored as one "theoretical arrival time"): a dimension with
 * rate R and burst B has emission interval T = 1000/R ms; a cost c passes when
 * max(tat, now) + min(c, B)·T − now ≤ B·T, and then tat becomes max(tat, now) + c·T. Charging the
 * full c while checking only min(c, B) lets a push larger than the burst through on a full
 * bucket (as debt) instead of refusing it forever.
 */
import type { Limits, Quotas } from '../tenants/model.js';

/** Bit per dimension in a verdict's `refused` mask. */
export const DIM_REQUESTS = 1;
export const DIM_MESSAGES = 2;
export const DIM_PARKED = 4;
export const DIM_MONTH_MESSAGES = 8;
export const DIM_MONTH_BYTES = 16;

/** Float slack (ms or tokens) so 1000/3-style intervals do not refuse on rounding noise. */
export const EPSILON = 1e-6;

/** Retry-After for a parked-poll refusal: a slot frees whenever another pop ends, so retry soon. */
export const PARKED_RETRY_MS = 1000;

/** A tenant's limits in the form the decision needs; compiled once per Limits/Quotas. */
export interface LimitPlan {
  readonly requestIntervalMs: number;
  readonly requestBurst: number;
  readonly messageIntervalMs: number;
  readonly messageBurst: number;
  readonly parkedPolls: number;
  /** 0 = unlimited. */
  readonly messagesPerMonth: number;
  /** 0 = unlimited. */
  readonly ingressBytesPerMonth: number;
}

/** What one admit would take. */
export interface LimitCost {
  readonly messages: number;
  readonly ingressBytes: number;
  readonly parkedPoll: boolean;
}

/** A tenant's counters as the store holds them (ms timestamps; counts for the current month). */
export interface LimitState {
  readonly requestTat: number;
  readonly messageTat: number;
  /** Live (unexpired) parked slots. */
  readonly parked: number;
  readonly monthMessages: number;
  readonly monthBytes: number;
}

/** The outcome of limitVerdict: what refused (if anything), and the state to store on admit. */
export interface Verdict {
  /** 0 = admitted; otherwise DIM_* bits of every dimension that refused. */
  readonly refused: number;
  /** ms until the request bucket could take this request (0 unless DIM_REQUESTS refused). */
  readonly requestWaitMs: number;
  /** ms until the message bucket could take this cost (0 unless DIM_MESSAGES refused). */
  readonly messageWaitMs: number;
  /** Whole requests left in the bucket after this decision. */
  readonly remaining: number;
  /** ms until the request bucket is full again. */
  readonly resetMs: number;
  /** The state to store; the input state itself when refused (a refusal consumes nothing). */
  readonly next: LimitState;
}

/** Compiles a tenant's limits; `divisor` splits rates and bursts across instances (failMode local). */
export function compileLimitPlan(limits: Limits, quotas: Quotas, divisor = 1): LimitPlan {
  return Object.freeze({
    requestIntervalMs: (1000 * divisor) / limits.requestsPerSec,
    requestBurst: Math.max(1, Math.floor(limits.requestBurst / divisor)),
    messageIntervalMs: (1000 * divisor) / limits.messagesPerSec,
    messageBurst: Math.max(1, Math.floor(limits.messageBurst / divisor)),
    parkedPolls: Math.max(1, Math.floor(limits.parkedPolls / divisor)),
    // Local mode cannot see the month's shared usage, so it leaves quotas to the deny cache.
    messagesPerMonth: divisor === 1 ? quotas.messagesPerMonth : 0,
    ingressBytesPerMonth: divisor === 1 ? quotas.ingressBytesPerMonth : 0,
  });
}

/** ms a GCRA bucket must wait before it can take `cost` (≤ 0: it can now). */
export function gcraWait(tat: number, now: number, cost: number, intervalMs: number, burst: number): number {
  return Math.max(tat, now) + Math.min(cost, burst) * intervalMs - now - burst * intervalMs;
}

/** Decides one admit against every dimension at once (see the file comment). */
export function limitVerdict(state: LimitState, plan: LimitPlan, cost: LimitCost, now: number): Verdict {
  let refused = 0;
  const requestWait = gcraWait(state.requestTat, now, 1, plan.requestIntervalMs, plan.requestBurst);
  if (requestWait > EPSILON) refused |= DIM_REQUESTS;
  let messageWait = 0;
  if (cost.messages > 0) {
    messageWait = gcraWait(state.messageTat, now, cost.messages, plan.messageIntervalMs, plan.messageBurst);
    if (messageWait > EPSILON) refused |= DIM_MESSAGES;
  }
  if (cost.parkedPoll && state.parked >= plan.parkedPolls) refused |= DIM_PARKED;
  if (cost.messages > 0 && plan.messagesPerMonth > 0 && state.monthMessages + cost.messages > plan.messagesPerMonth) {
    refused |= DIM_MONTH_MESSAGES;
  }
  if (cost.ingressBytes > 0 && plan.ingressBytesPerMonth > 0 && state.monthBytes + cost.ingressBytes > plan.ingressBytesPerMonth) {
    refused |= DIM_MONTH_BYTES;
  }

  const fullMs = plan.requestBurst * plan.requestIntervalMs;
  if (refused !== 0) {
    const backlog = Math.max(state.requestTat, now) - now;
    return {
      refused,
      requestWaitMs: refused & DIM_REQUESTS ? requestWait : 0,
      messageWaitMs: refused & DIM_MESSAGES ? messageWait : 0,
      remaining: Math.max(0, Math.floor((fullMs - backlog) / plan.requestIntervalMs + EPSILON)),
      resetMs: backlog,
      next: state,
    };
  }
  const requestTat = Math.max(state.requestTat, now) + plan.requestIntervalMs;
  return {
    refused: 0,
    requestWaitMs: 0,
    messageWaitMs: 0,
    remaining: Math.max(0, Math.floor((fullMs - (requestTat - now)) / plan.requestIntervalMs + EPSILON)),
    resetMs: requestTat - now,
    next: {
      requestTat,
      messageTat: cost.messages > 0 ? Math.max(state.messageTat, now) + cost.messages * plan.messageIntervalMs : state.messageTat,
      parked: cost.parkedPoll ? state.parked + 1 : state.parked,
      monthMessages: state.monthMessages + cost.messages,
      monthBytes: state.monthBytes + cost.ingressBytes,
    },
  };
}

/** The UTC calendar month containing `now`: an id for keys (`202612`) and its end in ms. */
export function monthWindow(now: number): { readonly id: string; readonly endMs: number } {
  // Every admit asks; the month changes twelve times a year.
  const last = lastMonth;
  if (last !== null && now >= last.startMs && now < last.endMs) return last;
  const d = new Date(now);
  const y = d.getUTCFullYear();
  const m = d.getUTCMonth();
  lastMonth = { id: `${y}${String(m + 1).padStart(2, '0')}`, startMs: Date.UTC(y, m, 1), endMs: Date.UTC(y, m + 1, 1) };
  return lastMonth;
}

let lastMonth: { readonly id: string; readonly startMs: number; readonly endMs: number } | null = null;

/** A refusal class and its Retry-After in whole seconds (docs/limits.md: at least 1). */
export interface RefusalClass {
  readonly code: 'rate_limited' | 'quota_exceeded';
  readonly retryAfterSec: number;
}

/**
 * Names a refused verdict. A spent quota wins over a rate (it will not clear by waiting a
 * second); among rates, the longest wait wins, since the request needs every dimension.
 */
export function classifyRefusal(refused: number, requestWaitMs: number, messageWaitMs: number, now: number, monthEndMs: number): RefusalClass {
  if (refused & (DIM_MONTH_MESSAGES | DIM_MONTH_BYTES)) {
    return { code: 'quota_exceeded', retryAfterSec: Math.max(1, Math.ceil((monthEndMs - now) / 1000)) };
  }
  const waitMs = Math.max(requestWaitMs, messageWaitMs, refused & DIM_PARKED ? PARKED_RETRY_MS : 0);
  return { code: 'rate_limited', retryAfterSec: Math.max(1, Math.ceil(waitMs / 1000 - EPSILON)) };
}

/** A verdict without the state to store: what both stores report to the limiter. */
export type Decision = Omit<Verdict, 'next'>;
