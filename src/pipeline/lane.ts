/** The lane a forwarded request travels: its key on the tenant's ring, or the lease whose broker it must reach (upstream/lane-key.ts). */
import type { BodyFacts } from '../body/facts.js';
import type { QueryFacts } from '../routes/query-params.js';
import type { RouteSpec } from '../routes/table.js';
import { popNamespaceLaneKey, popQueueLaneKey, pushLaneKey } from '../upstream/lane-key.js';
import type { Lane } from '../upstream/proxy.js';

export function laneOf(route: RouteSpec, params: Readonly<Record<string, string | undefined>>, query: QueryFacts, facts: BodyFacts | null): Lane {
  switch (route.lane) {
    case 'pop-queue':
      return { key: popQueueLaneKey(params.queue ?? '', params.partition, query.values), leaseId: null };
    case 'pop-ns':
      return { key: popNamespaceLaneKey(query.values), leaseId: null };
    case 'push':
      return { key: pushLaneKey(facts?.firstItem), leaseId: null };
    case 'lease':
      return { key: null, leaseId: params.leaseId ?? facts?.leaseId ?? null };
    default:
      return { key: null, leaseId: null };
  }
}
