/**
 * RateLimit-Policy and RateLimit fields (IETF httpapi ratelimit-headers, draft -08 and later:
 * Structured Field lists of a quoted policy name with `q`/`w` and `r`/`t` parameters). One
 * policy, "requests", is advertised: the request bucket that every call spends. A GCRA bucket of
 * burst B refilling at R/s is described as quota q=B over window w=ceil(B/R) seconds.
 */
import type { LimitPlan } from './verdict.js';

/** The fixed RateLimit-Policy value for a plan; compile it once per plan, not per request. */
export function rateLimitPolicy(plan: LimitPlan): string {
  const windowSec = Math.max(1, Math.ceil((plan.requestBurst * plan.requestIntervalMs) / 1000));
  return `"requests";q=${plan.requestBurst};w=${windowSec}`;
}

/** The per-response RateLimit value: whole requests left and seconds until the bucket is full. */
export function rateLimitField(remaining: number, resetMs: number): string {
  return `"requests";r=${remaining};t=${Math.max(0, Math.ceil(resetMs / 1000))}`;
}

/** Both response headers, lower-case names as the pipeline writes them. */
export function rateLimitHeaders(policy: string, remaining: number, resetMs: number): Readonly<Record<string, string>> {
  return { 'ratelimit-policy': policy, ratelimit: rateLimitField(remaining, resetMs) };
}
