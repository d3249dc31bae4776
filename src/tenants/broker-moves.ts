/**
 * Which broker URLs came into force or left it, from the directory's counts (TenantIndex
 * `brokerUrls`, `brokerMoves`), so the broker health checks and pools follow the URLs that changed
 * rather than walking every tenant (docs/tenancy.md, "Many tenants").
 */

/** Broker URLs that gained their first tenant in force (`added`) or lost their last (`removed`). */
export interface BrokerChange {
  readonly added: readonly string[];
  readonly removed: readonly string[];
}

/**
 * What subscribers must hear: `moves` holds the URLs that crossed zero since they were last told,
 * each with whether it was in force then, and `inForce` the URLs in force now. A URL that left and
 * came back (or the reverse) is in neither list. null when nothing changed.
 */
export function brokerChange(inForce: ReadonlyMap<string, number>, moves: ReadonlyMap<string, boolean>): BrokerChange | null {
  const added: string[] = [];
  const removed: string[] = [];
  for (const [url, was] of moves) {
    const now = inForce.has(url);
    if (now && !was) added.push(url);
    else if (was && !now) removed.push(url);
  }
  return added.length === 0 && removed.length === 0 ? null : { added, removed };
}

/** The broker URLs of one directory and those it has not told yet (TenantIndex's fields). */
export interface BrokerCounts {
  readonly brokerUrls: ReadonlyMap<string, number>;
  readonly brokerMoves: ReadonlyMap<string, boolean>;
}

/**
 * What subscribers must hear when directory `next` replaces `before` (a full build): compared with
 * what they were told of `before`, its URLs with its untold moves undone. O(URLs), as the build.
 */
export function brokersSwapped(before: BrokerCounts, next: BrokerCounts): BrokerChange | null {
  const told = new Map<string, boolean>();
  for (const url of before.brokerUrls.keys()) told.set(url, true);
  for (const [url, was] of before.brokerMoves) told.set(url, was);
  for (const url of next.brokerUrls.keys()) if (!told.has(url)) told.set(url, false);
  return brokerChange(next.brokerUrls, told);
}
