/**
 * Which stages a request runs, in order (docs/architecture.md, "The request path", whose stage
 * list is these lists: test/pipeline/stage-list.test.ts keeps them equal). Every request runs the
 * prelude, which finds its route; the route's own list is compiled once per route object, so a
 * reload (new route objects) compiles afresh, and a route skips what does not apply to it.
 */
import type { RouteSpec } from '../routes/table.js';
import type { Exchange } from './exchange.js';
import {
  actingTenant,
  admit,
  authenticate,
  authorize,
  body,
  contentEncoding,
  cors,
  emptyBatch,
  forward,
  gates,
  headsInFlight,
  health,
  hostTenant,
  noBody,
  preAdmit,
  publicRateLimit,
  publicTenant,
  query,
  route,
  singleHeaders,
  storage,
  ANSWERED,
  CONTINUE,
  type Parts,
  type Stage,
  type StageResult,
} from './stages.js';

/** Before the route is known. */
export const PRELUDE: readonly Stage[] = [singleHeaders, hostTenant, cors, route];

/** A public route (the health check): answered by the edge, no token, billed to no tenant. */
export const PUBLIC_STAGES: readonly Stage[] = [publicTenant, publicRateLimit, noBody, health];

/** A tenant's route, forwarded to one of its brokers; `storage` only on routes that write, `emptyBatch` only on acks. */
export const TENANT_STAGES: readonly Stage[] = [
  authenticate,
  actingTenant,
  authorize,
  gates,
  query,
  contentEncoding,
  preAdmit,
  headsInFlight,
  body,
  storage,
  admit,
  emptyBatch,
  forward,
];

const compiled = new WeakMap<RouteSpec, readonly Stage[]>();

/** The stages `r` runs after the prelude, compiled on first use. */
export function stagesOf(r: RouteSpec): readonly Stage[] {
  let list = compiled.get(r);
  if (list === undefined) {
    list = r.access === 'public' ? PUBLIC_STAGES : TENANT_STAGES.filter((s) => (s !== storage || r.writes) && (s !== emptyBatch || r.name === 'ack.batch'));
    compiled.set(r, list);
  }
  return list;
}

/** How a list ended: a refusal to render, ANSWERED, or null when every stage continued. */
export type Ended = Exclude<StageResult, typeof CONTINUE> | null;

/**
 * Runs `stages` from `from` until one refuses or answers. It stays synchronous until a stage
 * returns a promise: a synchronous step costs no microtask.
 */
export function runStages(x: Exchange, p: Parts, stages: readonly Stage[], from = 0): Ended | Promise<Ended> {
  for (let i = from; i < stages.length; i++) {
    const r = stages[i]!(x, p);
    // The last stage's outcome is the list's (CONTINUE is null, as is a list run to its end): its
    // promise is passed on as it is, without one more turn.
    if (r instanceof Promise) return i === stages.length - 1 ? r : r.then((v) => (v === CONTINUE ? runStages(x, p, stages, i + 1) : v));
    if (r !== CONTINUE) return r;
  }
  return null;
}

export { ANSWERED };
