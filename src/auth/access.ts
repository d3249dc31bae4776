/**
 * Role sets against access sets (docs/reference.md): a token passes when any of its roles is in the
 * route's set. Sets, not a ladder: `admin` passes only where it is listed.
 */
import type { RouteSpec } from '../routes/table.js';
import { edgeError, type EdgeError } from '../errors.js';
import type { Identity } from './jwt.js';

export function isAllowed(roles: ReadonlySet<string>, access: RouteSpec['access']): boolean {
  if (access === 'public') return true;
  for (let i = 0; i < access.length; i++) if (roles.has(access[i]!)) return true;
  return false;
}

/** The 403 for roles the route does not accept; it names the claim the roles were read from, so a caller can tell a misnamed claim from a missing role. */
export function roleRefusal(identity: Identity): EdgeError {
  const roles = identity.roles.size === 0 ? 'no roles' : `roles ${[...identity.roles].map((r) => JSON.stringify(r)).join(', ')}`;
  return edgeError('forbidden', `role not allowed on this route (${identity.rolesRead === undefined ? roles : `${roles}; ${identity.rolesRead}`})`);
}
