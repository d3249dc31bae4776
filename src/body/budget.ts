/**
 * Request bodies the edge buffers belong to their tenant and are counted against two budgets of
 * bytes (docs/limits.md, "Bodies in flight"): one per tenant, so a tenant that uploads slowly or
 * in bulk holds only its own share, and one per process, the bound on what all tenants together
 * can make the edge hold. A body of declared length takes its whole length before its first byte
 * is read; one of unknown length takes each chunk as it arrives. What a request took is given back
 * when the request ends, since its buffer lives until the broker has it.
 */
import { edgeError, type EdgeError } from '../errors.js';

/** Which budget refused: the tenant's own, or the process's. */
export type BudgetRefusal = 'tenant' | 'process';

export class BodyBudget {
  #process = 0;
  readonly #byTenant = new Map<string, number>();

  constructor(
    readonly perTenantBytes: number,
    readonly perProcessBytes: number,
  ) {}

  /** Bytes held now, by all tenants. */
  get heldBytes(): number {
    return this.#process;
  }

  /** Bytes held now by one tenant. */
  heldBy(tenantId: string): number {
    return this.#byTenant.get(tenantId) ?? 0;
  }

  /** An account for one request's body, empty until it takes bytes. */
  open(tenantId: string): BodyAccount {
    return new BodyAccount(this, tenantId);
  }

  /** Takes `n` bytes for the tenant, or says which budget they would exceed (nothing taken then). */
  take(tenantId: string, n: number): BudgetRefusal | null {
    const held = this.#byTenant.get(tenantId) ?? 0;
    if (held + n > this.perTenantBytes) return 'tenant';
    if (this.#process + n > this.perProcessBytes) return 'process';
    this.#byTenant.set(tenantId, held + n);
    this.#process += n;
    return null;
  }

  give(tenantId: string, n: number): void {
    if (n === 0) return;
    const left = (this.#byTenant.get(tenantId) ?? 0) - n;
    if (left > 0) this.#byTenant.set(tenantId, left);
    else this.#byTenant.delete(tenantId);
    this.#process -= n;
  }
}

/** One request's share of the budgets; close() gives all of it back, once. */
export class BodyAccount {
  #held = 0;

  constructor(
    readonly budget: BodyBudget,
    readonly tenantId: string,
  ) {}

  get held(): number {
    return this.#held;
  }

  /** Takes `n` more bytes: null, or the refusal to answer with (the connection is then closed, not read on). */
  take(n: number): EdgeError | null {
    const refused = this.budget.take(this.tenantId, n);
    if (refused === null) {
      this.#held += n;
      return null;
    }
    return budgetRefusal(refused);
  }

  close(): void {
    this.budget.give(this.tenantId, this.#held);
    this.#held = 0;
  }
}

/** 429 for a tenant over its own share (it may retry once its bodies are in), 503 for a full process. */
export function budgetRefusal(which: BudgetRefusal): EdgeError {
  return which === 'tenant'
    ? edgeError('rate_limited', 'too many request bodies in flight for this tenant', { retryAfterSec: 1 })
    : edgeError('edge_overloaded', undefined, { retryAfterSec: 1 });
}
