/**
 * The storage gate, pure: a tenant at or over its plan's storage is blocked
 * from writes, and released only once usage drops below 90%, so a tenant hovering at the line
 * does not flap between 403 and 200 on every control-plane update.
 */

/** Usage must fall below this share of the plan before a blocked tenant may write again. */
export const STORAGE_RELEASE_RATIO = 0.9;

/** True when writes are blocked. `planBytes` 0 means unlimited; unknown usage never blocks. */
export function storageVerdict(usedBytes: number | undefined, planBytes: number, blockedBefore: boolean): boolean {
  if (usedBytes === undefined || planBytes <= 0) return false;
  if (usedBytes >= planBytes) return true;
  return blockedBefore && usedBytes >= planBytes * STORAGE_RELEASE_RATIO;
}
