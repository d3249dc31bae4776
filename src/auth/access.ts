/**
 * Role sets against access sets (docs/reference.md): a token passes when any of its roles is in the
 * route's set. Sets, not a ladder: `admin` passes only where it is listed.
 */
import type { RouteSpec } from '../routes/table.js';

export function isAllowed(roles: ReadonlySet<string>, access: RouteSpec['access']): boolean {
  if (access === 'public') return true;
  for (let i = 0; i < access.length; i++) if (roles.has(access[i]!)) return true;
  return false;
}
