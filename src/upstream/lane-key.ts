/**
 * Lane keys (docs/clusters.md; the Queen clients' own lane rule): the string a request hashes onto its tenant's ring so
 * that one lane keeps meeting one broker and its long-poll wake-ups stay local. Pure.
 * Empty query values count as absent, as the SDKs treat them. Placement is a performance matter
 * (brokers share one PostgreSQL), so an odd key costs locality, never correctness.
 */

/** Consumer group the broker uses when a pop names none. */
export const QUEUE_MODE_GROUP = '__QUEUE_MODE__';
/** Partition the broker uses when a pushed item names none. */
export const DEFAULT_PARTITION = 'Default';

/** A query's values by name (the edge's parsed query, or URLSearchParams). */
export interface QueryValues {
  get(name: string): string | null | undefined;
}

/** `queue:partition:consumerGroup` of a pop by queue; `*` for no partition, queue mode for no group. */
export function popQueueLaneKey(queue: string, partition: string | undefined, query: QueryValues): string {
  return `${queue}:${partition || '*'}:${query.get('consumerGroup') || QUEUE_MODE_GROUP}`;
}

/** `namespace:task:consumerGroup` of a pop by namespace or task, `*` for each missing part. */
export function popNamespaceLaneKey(query: QueryValues): string {
  return `${query.get('namespace') || '*'}:${query.get('task') || '*'}:${query.get('consumerGroup') || '*'}`;
}

/**
 * `queue:partition` of a push's first item, so a partition's writes meet one broker. null when the
 * first item is not an object with a non-empty string `queue` (and a string `partition`, if any):
 * the broker will refuse it, so any healthy broker may say so.
 */
export function pushLaneKey(firstItem: unknown): string | null {
  if (typeof firstItem !== 'object' || firstItem === null || Array.isArray(firstItem)) return null;
  const { queue, partition } = firstItem as { queue?: unknown; partition?: unknown };
  if (typeof queue !== 'string' || queue === '') return null;
  if (partition === undefined || partition === null) return `${queue}:${DEFAULT_PARTITION}`;
  return typeof partition === 'string' ? `${queue}:${partition}` : null;
}
