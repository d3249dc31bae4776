/**
 * A key belongs to one incarnation of its tenant (docs/api-keys.md, "A key dies with its
 * tenant"). Whatever removed a tenant from the directory (a file reload, an admin delete, on this
 * instance or heard from another), every instance that sees it go revokes the keys created up to
 * that moment: in the store, so a tenant created later under the same id starts with none, and here
 * at once (the verifier refuses them before the store confirms). Several instances revoking the same
 * tenant is harmless; a revocation that fails (Redis away) is retried until it lands, and meanwhile
 * this instance keeps refusing the former tenant's keys even if the id comes back (and for a minute
 * after, while what other instances revoked reaches it).
 */
import type { Logger } from '../observability/log.js';
import type { ApiKeyStore } from './store.js';
import type { ApiKeyVerifier } from './verifier.js';

/** How long a removal is still enforced here once its revocation landed: past a cache entry's life (30 s) and several revocation checks. */
const HOLD_MS = 60_000;
/** Delay before failed revocations are tried again. */
const RETRY_MS = 1000;

export class TenantKeyLifetimes {
  readonly #store: ApiKeyStore;
  readonly #verifier: ApiKeyVerifier;
  readonly #log: Logger;
  readonly #clock: () => number;
  /** Removed tenants whose keys are still to revoke, with the moment each was removed. */
  readonly #pending = new Map<string, number>();
  #running: Promise<void> | null = null;
  #again = false;
  #retry: NodeJS.Timeout | null = null;
  #failing = false;

  constructor(store: ApiKeyStore, verifier: ApiKeyVerifier, deps: { log: Logger; clock: () => number }) {
    this.#store = store;
    this.#verifier = verifier;
    this.#log = deps.log;
    this.#clock = deps.clock;
  }

  /** Tenants the directory no longer has: their keys are refused here now and revoked in the store. */
  removed(tenants: Iterable<string>): void {
    const at = this.#clock();
    let any = false;
    for (const t of tenants) {
      this.#verifier.tenantRemoved(t, at);
      this.#pending.set(t, at);
      any = true;
    }
    if (any) this.#revokePending();
  }

  /** One pass over the pending tenants at a time; a removal during a pass runs another after it. */
  #revokePending(): void {
    if (this.#running) {
      this.#again = true;
      return;
    }
    this.#running = this.#drain().finally(() => {
      this.#running = null;
      if (!this.#again) return;
      this.#again = false;
      this.#revokePending();
    });
  }

  async #drain(): Promise<void> {
    for (const [tenant, at] of this.#pending) {
      try {
        // Logged as the edge's own doing: no operator asked for these revocations.
        const ids = await this.#store.revokeAll(tenant, at, 'edge:tenant-removed');
        if (this.#pending.get(tenant) === at) this.#pending.delete(tenant);
        // Another instance may have revoked them first, and what it revoked reaches this one's
        // cache (or copy of the store) by its message or the next check: held until surely here.
        setTimeout(() => this.#verifier.forgetRemoval(tenant, at), HOLD_MS).unref();
        if (ids.length > 0) this.#log.info({ tenant, keys: ids }, 'API keys revoked with their tenant (removed from the directory)');
      } catch (err) {
        if (!this.#failing)
          this.#log.warn({ err, tenant }, 'API keys of a removed tenant not revoked yet (store unreachable); this instance refuses them meanwhile');
        this.#failing = true;
        this.#retrySoon();
        return;
      }
    }
    this.#failing = false;
  }

  #retrySoon(): void {
    if (this.#retry) return;
    this.#retry = setTimeout(() => {
      this.#retry = null;
      this.#revokePending();
    }, RETRY_MS);
    this.#retry.unref();
  }

  close(): void {
    if (this.#retry) clearTimeout(this.#retry);
    this.#retry = null;
  }
}
