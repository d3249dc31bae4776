/**
 * Request bodies the edge buffers belong to their tenant and are counted against two budgets of
 * bytes (docs/limits.md, "Bodies in flight"):
 *
 * - the tenant's own (`perTenantBytes`), which a body of declared length claims whole from its
 *   head, so a tenant's concurrency of uploads is bounded before a byte is read; this holds no
 *   memory and only ever refuses the tenant itself;
 * - the process's (`perProcessBytes`), which is the memory: charged for bytes as they arrive,
 *   never for a length only announced, and shared max-min fairly. While it has room, any tenant
 *   takes from it; once full, a tenant within its fair share (`perProcessBytes` / tenants holding
 *   bytes, itself counted) takes what it needs from the bodies still arriving of the tenants above
 *   theirs, which are refused (`503`), largest holder first. So no group of tenants can keep
 *   another below its fair share with bodies they have not finished sending.
 *
 * What a request took is given back when the request ends, since its buffer lives until the broker
 * has it.
 */
import { edgeError, type EdgeError } from '../errors.js';

/** Which budget refused: the tenant's own, or the process's. */
export type BudgetRefusal = 'tenant' | 'process';

/** One tenant's bytes: claimed against its own budget, and held (received) in the process's. */
interface Holding {
  claimed: number;
  held: number;
}

export class BodyBudget {
  #process = 0;
  /** Tenants with bytes claimed or held; an entry leaves when both are 0. */
  readonly #byTenant = new Map<string, Holding>();
  /** Tenants holding received bytes: the fair share divides the process budget among them. */
  #holders = 0;
  /** Accounts whose body is still arriving: the only ones a fair share may take bytes from. */
  readonly #arriving = new Set<BodyAccount>();

  constructor(
    readonly perTenantBytes: number,
    readonly perProcessBytes: number,
  ) {}

  /** Bytes received and held now, by all tenants. */
  get heldBytes(): number {
    return this.#process;
  }

  /** Bytes received and held now by one tenant. */
  heldBy(tenantId: string): number {
    return this.#byTenant.get(tenantId)?.held ?? 0;
  }

  /** Bytes of one tenant's own budget its bodies claim now (declared lengths, or what arrived). */
  claimedBy(tenantId: string): number {
    return this.#byTenant.get(tenantId)?.claimed ?? 0;
  }

  /** A tenant's fair share of the process budget now: divided among the tenants holding bytes, `tenantId` counted. */
  fairShare(tenantId: string): number {
    const holds = (this.#byTenant.get(tenantId)?.held ?? 0) > 0;
    return this.perProcessBytes / (this.#holders + (holds ? 0 : 1));
  }

  /** An account for one request's body, empty until it claims or takes bytes; its body is arriving until done(). */
  open(tenantId: string): BodyAccount {
    const account = new BodyAccount(this, tenantId);
    this.#arriving.add(account);
    return account;
  }

  /** Claims `n` bytes of the tenant's own budget (no memory), or refuses ('tenant'; nothing claimed then). */
  claim(tenantId: string, n: number): BudgetRefusal | null {
    const h = this.#byTenant.get(tenantId);
    const claimed = h?.claimed ?? 0;
    if (claimed + n > this.perTenantBytes) return 'tenant';
    if (h === undefined) this.#byTenant.set(tenantId, { claimed: n, held: 0 });
    else h.claimed = claimed + n;
    return null;
  }

  /**
   * Takes `n` received bytes for the tenant from the process budget. When it is full, a tenant
   * within its fair share takes them from arriving bodies of tenants above theirs (refused then);
   * otherwise 'process' and nothing taken. The tenant must have claimed them (claim()).
   */
  take(tenantId: string, n: number): BudgetRefusal | null {
    const h = this.#byTenant.get(tenantId)!;
    if (this.#process + n > this.perProcessBytes) {
      const share = this.fairShare(tenantId);
      if (h.held + n > share || !this.#reclaim(this.#process + n - this.perProcessBytes, share)) return 'process';
    }
    if (h.held === 0) this.#holders++;
    h.held += n;
    this.#process += n;
    return null;
  }

  /** Gives back what an account claimed and held. */
  give(account: BodyAccount, claimed: number, held: number): void {
    this.#arriving.delete(account);
    if (claimed === 0 && held === 0) return;
    const h = this.#byTenant.get(account.tenantId)!;
    h.claimed -= claimed;
    if (held > 0) {
      h.held -= held;
      this.#process -= held;
      if (h.held === 0) this.#holders--;
    }
    if (h.claimed === 0 && h.held === 0) this.#byTenant.delete(account.tenantId);
  }

  /** The body is in whole: its bytes are no longer taken for a fair share. */
  arrived(account: BodyAccount): void {
    this.#arriving.delete(account);
  }

  /**
   * Frees `need` bytes by refusing arriving bodies of tenants above `share`, the largest holders'
   * largest bodies first, never taking a tenant further than one body below its share; refuses
   * none when that cannot free enough. Runs only when the process budget is full.
   */
  #reclaim(need: number, share: number): boolean {
    const over: BodyAccount[] = [];
    for (const a of this.#arriving) if (a.held > 0 && this.heldBy(a.tenantId) > share) over.push(a);
    over.sort((a, b) => this.heldBy(b.tenantId) - this.heldBy(a.tenantId) || b.held - a.held);
    const left = new Map<string, number>();
    const victims: BodyAccount[] = [];
    let freed = 0;
    for (const a of over) {
      if (freed >= need) break;
      const held = left.get(a.tenantId) ?? this.heldBy(a.tenantId);
      if (held <= share) continue;
      victims.push(a);
      left.set(a.tenantId, held - a.held);
      freed += a.held;
    }
    if (freed < need) return false;
    for (const a of victims) a.evict();
    return true;
  }
}

/** One request's share of the budgets; close() gives all of it back, once. */
export class BodyAccount {
  #claimed = 0;
  #held = 0;
  /** Told when the process budget took this body's bytes back for a tenant within its fair share. */
  onEvict: ((refusal: EdgeError) => void) | null = null;

  constructor(
    readonly budget: BodyBudget,
    readonly tenantId: string,
  ) {}

  /** Bytes received and held. */
  get held(): number {
    return this.#held;
  }

  /** Claims a declared length of the tenant's own budget before any byte is read: null, or the refusal. */
  claim(n: number): EdgeError | null {
    const refused = this.budget.claim(this.tenantId, n);
    if (refused !== null) return budgetRefusal(refused);
    this.#claimed += n;
    return null;
  }

  /**
   * Takes `n` more received bytes (claiming what the declared length did not cover): null, or the
   * refusal to answer with (the connection is then closed, not read on).
   */
  take(n: number): EdgeError | null {
    if (n === 0) return null;
    const unclaimed = this.#held + n - this.#claimed;
    if (unclaimed > 0) {
      const over = this.claim(unclaimed);
      if (over !== null) return over;
    }
    const refused = this.budget.take(this.tenantId, n);
    if (refused !== null) return budgetRefusal(refused);
    this.#held += n;
    return null;
  }

  /** The whole body is in. */
  arrived(): void {
    this.budget.arrived(this);
  }

  close(): void {
    this.budget.give(this, this.#claimed, this.#held);
    this.#claimed = 0;
    this.#held = 0;
  }

  /** Refused for a fairer share: everything is given back now, and the reader told. */
  evict(): void {
    this.close();
    const told = this.onEvict;
    this.onEvict = null;
    told?.(budgetRefusal('process'));
  }
}

/** 429 for a tenant over its own share (it may retry once its bodies are in), 503 for a full process. */
export function budgetRefusal(which: BudgetRefusal): EdgeError {
  return which === 'tenant'
    ? edgeError('rate_limited', 'too many request bodies in flight for this tenant', { retryAfterSec: 1 })
    : edgeError('edge_overloaded', undefined, { retryAfterSec: 1 });
}
