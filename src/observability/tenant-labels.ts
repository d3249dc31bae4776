/**
 * Which tenant ids appear as `tenant` label values on /metrics (docs/operating.md, "Tenant labels"):
 * `metrics.tenantLabels` is `all`, `none`, or `first:N` (the default, `first:100`).
 *
 * With `first:N` the first N tenants this process records (requests, usage, parked polls) take a
 * slot each and keep it until the process ends; every later tenant is counted under `_other`. A
 * slot is never given back or taken over, so a series never changes owner and every counter
 * stays monotonic (a tenant's counts never move between series), and recording costs one Set
 * lookup however many tenants there are. The busiest tenants are, in practice, among the first
 * seen after a start. Exact per-tenant figures stay in the usage API and export.
 */

/** The label value of every tenant without a slot. */
export const OTHER_TENANT = '_other';

/** How many tenants may have a label of their own; Infinity for `all` (the schema checked the grammar). */
export function tenantLabelSlots(setting: string): number {
  if (setting === 'all') return Number.POSITIVE_INFINITY;
  if (setting === 'none') return 0;
  const m = /^first:(\d+)$/.exec(setting);
  if (!m) throw new Error(`metrics.tenantLabels: not all, none or first:N: ${setting}`);
  return Number(m[1]);
}

/** Hands out the slots; `label()` is what a recorder calls with a tenant id. */
export class TenantLabels {
  readonly #owners = new Set<string>();

  /** @param slots tenants with a label of their own; `keep` are label values passed through as they are (no tenant, global). */
  constructor(
    readonly slots: number,
    readonly keep: ReadonlySet<string> = new Set(),
  ) {}

  label(tenantId: string): string {
    if (this.#owners.has(tenantId) || this.keep.has(tenantId)) return tenantId;
    if (this.#owners.size >= this.slots) return OTHER_TENANT;
    this.#owners.add(tenantId);
    return tenantId;
  }
}

/** Sums values by label: folds per-tenant figures read at scrape time into their label's. */
export function foldByLabel<T>(entries: Iterable<[string, T]>, label: (tenantId: string) => string, value: (v: T) => number): Map<string, number> {
  const out = new Map<string, number>();
  for (const [tenant, v] of entries) {
    const l = label(tenant);
    out.set(l, (out.get(l) ?? 0) + value(v));
  }
  return out;
}
