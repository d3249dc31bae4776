/**
 * `GET /admin/v1/tenants` for many tenants (docs/operating.md, "Listing tenants"): a page of the
 * tenants in id order, after a cursor, filtered by status, plan and an id or host prefix, no
 * larger than PAGE_MAX_BYTES. Pure: the handler passes the directory and the summary view.
 */
import { type EdgeError, edgeError } from '../errors.js';
import type { Tenant } from '../tenants/model.js';

/** A page's JSON stays under this, whatever `limit` asks (hosts and brokers make summaries vary). */
export const PAGE_MAX_BYTES = 256 * 1024;
export const DEFAULT_PAGE = 100;
export const MAX_PAGE = 1000;

/** What a listing asks for. */
export interface ListQuery {
  readonly limit: number;
  /** The last id of the previous page; the page starts after it. */
  readonly after: string | null;
  readonly status: 'active' | 'suspended' | null;
  readonly plan: string | null;
  /** Matches an id, or any of a tenant's hosts, starting with it. */
  readonly prefix: string | null;
}

/** The query string's `limit`, `cursor`, `status`, `plan` and `prefix`, or the refusal naming the bad one. */
export function listQuery(q: URLSearchParams): ListQuery | EdgeError {
  const rawLimit = q.get('limit');
  const limit = rawLimit === null ? DEFAULT_PAGE : Number(rawLimit);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) return edgeError('invalid_request', `limit: an integer from 1 to ${MAX_PAGE}`);
  const cursor = q.get('cursor');
  const after = cursor === null || cursor === '' ? null : decodeCursor(cursor);
  if (after === undefined) return edgeError('invalid_request', 'cursor: not a cursor this API returned');
  const status = q.get('status');
  if (status !== null && status !== 'active' && status !== 'suspended') return edgeError('invalid_request', 'status: active or suspended');
  return { limit, after, status, plan: q.get('plan') || null, prefix: q.get('prefix') || null };
}

/** Cursors are opaque to clients (base64url of the last id), so the order key may change without breaking them. */
export function encodeCursor(lastId: string): string {
  return Buffer.from(lastId, 'utf8').toString('base64url');
}

function decodeCursor(cursor: string): string | undefined {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) return undefined;
  return Buffer.from(cursor, 'base64url').toString('utf8');
}

export function matches(t: Tenant, q: ListQuery): boolean {
  if (q.status !== null && t.status !== q.status) return false;
  if (q.plan !== null && t.plan.id !== q.plan) return false;
  if (q.prefix === null || t.id.startsWith(q.prefix)) return true;
  const host = q.prefix.toLowerCase();
  return t.hosts.some((h) => h.startsWith(host));
}

/** The first index in sorted `ids` whose id is after `after`. */
function startIndex(ids: readonly string[], after: string | null): number {
  if (after === null) return 0;
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (ids[mid]! <= after) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/**
 * One page: up to `limit` matching tenants after the cursor, in id order, cut short before the
 * page's JSON would pass PAGE_MAX_BYTES (never below one tenant); `next` continues after the
 * last one listed, null when no tenant is left to look at.
 */
export function tenantPage<V>(
  ids: readonly string[],
  byId: (id: string) => Tenant | undefined,
  q: ListQuery,
  view: (t: Tenant) => V,
): { readonly tenants: V[]; readonly next: string | null } {
  const out: V[] = [];
  // The envelope's own bytes ({"tenants":[],"next":"..."}, a cursor of up to 200 characters).
  let bytes = 256;
  let i = startIndex(ids, q.after);
  for (; i < ids.length && out.length < q.limit; i++) {
    const t = byId(ids[i]!);
    if (t === undefined || !matches(t, q)) continue;
    const v = view(t);
    const size = Buffer.byteLength(JSON.stringify(v)) + 1;
    if (out.length > 0 && bytes + size > PAGE_MAX_BYTES) break;
    bytes += size;
    out.push(v);
  }
  return { tenants: out, next: i < ids.length ? encodeCursor(ids[i - 1]!) : null };
}

/** The directory's ids in order, sorted again only after the directory changed (its generation). */
export class SortedTenantIds {
  #generation = -1;
  #ids: readonly string[] = [];

  of(generation: number, all: () => Iterable<Tenant>): readonly string[] {
    if (generation !== this.#generation) {
      this.#ids = Array.from(all(), (t) => t.id).sort();
      this.#generation = generation;
    }
    return this.#ids;
  }
}
