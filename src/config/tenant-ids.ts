/**
 * Work over every tenant of a configuration without holding the event loop. A tenant map of
 * 100,000 keys is a dictionary-mode object: listing its keys (Object.keys, or the start of a
 * for-in) takes tens of milliseconds in one go, which no slicing can split. So each map's ids are
 * listed once and kept beside it (the off-thread reader hands them over as it copies the tenants
 * in, and lists nothing), and loops walk that list in slices that yield between them.
 */
import type { RawTenant } from './schema.js';

type TenantMap = Readonly<Record<string, RawTenant>>;

/** Ids by tenant map. A map is never changed once built (a reload builds a new one), so its list stays true. */
const known = new WeakMap<TenantMap, readonly string[]>();

/** The ids of `tenants`, in file order; listed on first use only. */
export function tenantIds(tenants: TenantMap): readonly string[] {
  let ids = known.get(tenants);
  if (ids === undefined) {
    ids = Object.keys(tenants);
    known.set(tenants, ids);
  }
  return ids;
}

/** Records the ids of a map built from them (in their order), so tenantIds never lists them. */
export function rememberTenantIds(tenants: TenantMap, ids: readonly string[]): void {
  known.set(tenants, ids);
}

/** What a reader found between two tenant maps it built: the ids added, changed or removed from `base`. */
export interface TenantChanges {
  readonly base: TenantMap;
  readonly changed: readonly string[];
}

const changes = new WeakMap<TenantMap, TenantChanges>();

/** Records how `tenants` differs from `base` (both built by one reader, and never changed since). */
export function rememberChanges(tenants: TenantMap, found: TenantChanges): void {
  changes.set(tenants, found);
}

/** How `tenants` differs from the map it was read against, when its reader said. */
export function changesOf(tenants: TenantMap): TenantChanges | undefined {
  return changes.get(tenants);
}

/** Longest run of work over the tenants between two yields to the event loop. */
export const SLICE_MS = 5;

/** Resolves on the event loop's next turn: what sliced work waits for between slices. */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Calls between two looks at the clock: one call is a microsecond or less. */
const CHECK_EVERY = 64;

/**
 * Calls `visit` for each item of `items` in order, yielding to the event loop whenever a slice
 * has run SLICE_MS; resolves with the number of yields (tests check the work was split).
 */
export async function inSlices<T>(items: readonly T[], visit: (item: T) => void): Promise<number> {
  let yields = 0;
  let sliceStart = performance.now();
  for (let i = 0; i < items.length; i++) {
    visit(items[i]!);
    if ((i + 1) % CHECK_EVERY !== 0 || performance.now() - sliceStart < SLICE_MS) continue;
    await nextTurn();
    yields++;
    sliceStart = performance.now();
  }
  return yields;
}

/** Runs `steps` to its end, yielding to the event loop at its yields once a slice has run SLICE_MS; its result. */
export async function stepInSlices<R>(steps: Generator<void, R, void>): Promise<R> {
  let sliceStart = performance.now();
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
    if (performance.now() - sliceStart < SLICE_MS) continue;
    await nextTurn();
    sliceStart = performance.now();
  }
}

/** Runs `steps` to its end at once; its result (the synchronous counterpart of stepInSlices). */
export function runSteps<R>(steps: Generator<void, R, void>): R {
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** Calls `visit` for each tenant of `tenants`, in file order and in slices (inSlices). */
export function eachTenant(tenants: TenantMap, visit: (id: string, tenant: RawTenant) => void): Promise<number> {
  return inSlices(tenantIds(tenants), (id) => visit(id, tenants[id]!));
}
