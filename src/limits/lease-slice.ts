/**
 * Leased request-rate limits, the pure part (docs/limits.md, "Leased mode"): which requests an
 * instance may admit from its local slice, and how large a slice it asks Redis for.
 */
import type { LimitCost, LimitPlan } from './verdict.js';

/** The `limits.lease` settings. */
export interface LeaseSettings {
  /** How long a slice may be spent before its unused tokens go back to the shared bucket. */
  readonly durationMs: number;
  /** Share of the tenant's burst that all instances' slices may hold together. */
  readonly sliceFraction: number;
}

/**
 * Tokens one instance asks for: its share (1/instances) of the smaller of what the bucket refills
 * during one lease and `sliceFraction` of the burst, at least 1. The first bound keeps a slice to
 * what the instance can fairly spend before the lease ends; the second caps what all instances
 * together can hold unused (the overshoot bound) to sliceFraction × burst, whatever their number.
 */
export function leaseSlice(plan: LimitPlan, instances: number, lease: LeaseSettings): number {
  const refillPerLease = lease.durationMs / plan.requestIntervalMs;
  const ofBurst = plan.requestBurst * lease.sliceFraction;
  return Math.max(1, Math.floor(Math.min(refillPerLease, ofBurst) / Math.max(1, instances)));
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
 * Whether a request's only shared dimension is the request rate, so a slice may admit it: no
 * messages (message rate and monthly messages stay exact), no parked-poll slot, and no bytes
 * counted against a byte quota. Every other request takes the one exact admit.
 */
export function leasable(plan: LimitPlan, cost: LimitCost): boolean {
  return cost.messages === 0 && !cost.parkedPoll && (cost.ingressBytes === 0 || plan.ingressBytesPerMonth === 0);
}
