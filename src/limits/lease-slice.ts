/**
 * Leased limits, the pure part (docs/limits.md, "Leased mode"): which requests an instance may
 * admit from its local slices, and how much of each shared dimension one lease call asks for.
 */
import type { LimitCost, LimitPlan } from './verdict.js';

/** The `limits.lease` settings. */
export interface LeaseSettings {
  /** How long a slice may be spent before its unused part goes back to Redis. */
  readonly durationMs: number;
  /** Share of a tenant's burst that all instances' slices may hold together. */
  readonly sliceFraction: number;
}

/**
 * Tokens one instance asks for from a GCRA bucket: its share (1/instances) of the smaller of what
 * the bucket refills during one lease and `sliceFraction` of the burst, at least 1. The first
 * bound keeps a slice to what the instance can fairly spend before the lease ends; the second caps
 * what all instances together can hold unused (the overshoot bound) to sliceFraction × burst,
 * whatever their number.
 */
function rateSlice(intervalMs: number, burst: number, instances: number, lease: LeaseSettings): number {
  const refillPerLease = lease.durationMs / intervalMs;
  const ofBurst = burst * lease.sliceFraction;
  return Math.max(1, Math.floor(Math.min(refillPerLease, ofBurst) / Math.max(1, instances)));
}

/** The request-bucket slice (see rateSlice). */
export function leaseSlice(plan: LimitPlan, instances: number, lease: LeaseSettings): number {
  return rateSlice(plan.requestIntervalMs, plan.requestBurst, instances, lease);
}

/** The message-bucket slice (see rateSlice). */
export function messageSlice(plan: LimitPlan, instances: number, lease: LeaseSettings): number {
  return rateSlice(plan.messageIntervalMs, plan.messageBurst, instances, lease);
}

/**
 * ms before an instance whose slice is spent may call again, after a grant of `granted` of
 * `wanted` tokens and a bucket that could give `wanted` again in `waitMs`. A short grant means
 * other instances drain the bucket too, so the instance also leaves each of them half a slice of
 * refill: contending instances call less often than once per slice each (fewer round trips),
 * while together they can still take (instances / (1 + (instances − 1) / 2)) × the rate, e.g.
 * 1.5× with three, so a backlog after a stall drains instead of overflowing the burst.
 */
export function callAgainAfterMs(granted: number, wanted: number, waitMs: number, instances: number, intervalMs: number): number {
  const backOff = granted < wanted ? ((Math.max(1, instances) - 1) * wanted * intervalMs) / 2 : 0;
  return waitMs + backOff;
}

/**
 * Whether a slice may admit a request: not a parked poll (its slot is a live count, not a rate),
 * and not a push larger than the message burst (only the exact admit lets it through, as debt).
 * A push larger than a slice asks for a slice of its own size.
 */
export function leasable(plan: LimitPlan, cost: LimitCost): boolean {
  return !cost.parkedPoll && cost.messages <= plan.messageBurst;
}

/** What one lease call asks for in each shared dimension. */
export interface LeaseWants {
  readonly requests: number;
  /** Message-bucket tokens, and as many units of the month's message quota. */
  readonly messages: number;
  /** Units of the month's ingress-byte quota. */
  readonly bytes: number;
}

/** This instance's recent traffic of one tenant: moving averages per admitted request. */
export interface LeaseTraffic {
  messagesPerRequest: number;
  bytesPerRequest: number;
}

/** Weight of the newest request in the moving averages (about the last 16 requests count). */
const TRAFFIC_WEIGHT = 1 / 16;

/** Folds one request into the tenant's moving averages. */
export function observeTraffic(traffic: LeaseTraffic, cost: LimitCost): void {
  traffic.messagesPerRequest += (cost.messages - traffic.messagesPerRequest) * TRAFFIC_WEIGHT;
  traffic.bytesPerRequest += (cost.ingressBytes - traffic.bytesPerRequest) * TRAFFIC_WEIGHT;
}

/**
 * Slices for one call: a request slice, and of messages and bytes what a request slice of the
 * recent traffic would spend (messages capped at a message slice), but never less than the
 * request at hand needs. A tenant that only pops holds no message tokens another instance could
 * want; one that pushes holds about a lease's worth.
 */
export function leaseWants(plan: LimitPlan, instances: number, lease: LeaseSettings, traffic: LeaseTraffic, cost: LimitCost): LeaseWants {
  const requests = leaseSlice(plan, instances, lease);
  const messages = Math.max(cost.messages, Math.min(messageSlice(plan, instances, lease), Math.round(requests * traffic.messagesPerRequest)));
  const bytes = Math.max(cost.ingressBytes, Math.round(requests * traffic.bytesPerRequest));
  return { requests, messages, bytes };
}
