/**
 * The request rate charged from the head, locally (docs/limits.md, "Bodies in flight"): a request
 * is counted from its head until its admit is decided or it ends without one, and a tenant may
 * have no more heads in flight in this process than its request burst. The shared bucket is only
 * charged by the admit after the body (one round trip per request, as before), so without this a
 * tenant's uploads that never finish were never charged and any number of them could be read at
 * once; with it, a herd of uploads is refused from its heads beyond the burst, before any body is
 * read. The pipeline charges the shared bucket for a head whose body it began to read but never
 * received whole, since that head never reaches the admit.
 */
export class HeadsInFlight {
  readonly #byTenant = new Map<string, number>();

  /** Heads of this tenant in flight now. */
  count(tenantId: string): number {
    return this.#byTenant.get(tenantId) ?? 0;
  }

  /** Counts one more head, or null when the tenant already has `burst` in flight; the release is idempotent. */
  enter(tenantId: string, burst: number): (() => void) | null {
    const n = this.#byTenant.get(tenantId) ?? 0;
    if (n >= burst) return null;
    this.#byTenant.set(tenantId, n + 1);
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      const left = (this.#byTenant.get(tenantId) ?? 1) - 1;
      if (left > 0) this.#byTenant.set(tenantId, left);
      else this.#byTenant.delete(tenantId);
    };
  }
}
