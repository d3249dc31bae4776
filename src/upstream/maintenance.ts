/**
 * Operators read and switch a broker's maintenance modes through the admin API; tenants never
 * reach `/api/v1/system/**`. The broker has two switches: `maintenance` (pushes go to its file
 * buffer) and `pop` maintenance (every pop answers empty). Its routes need an admin identity, so
 * in `mint` mode the edge signs an admin token for the call; otherwise it sends none.
 */
import { request } from 'undici';
import type { Identity } from '../auth/jwt.js';
import type { UpstreamMinter } from '../auth/mint.js';

/** Which switch: `push` is the broker's `maintenance`, `pop` its pop maintenance. */
export type MaintenanceSwitch = 'push' | 'pop';

/** One broker's switches as it reported them, or why it could not be asked. */
export type BrokerMaintenanceState =
  | { readonly url: string; readonly maintenance: boolean; readonly popMaintenance: boolean }
  | { readonly url: string; readonly error: string /** The broker's HTTP status when it answered with something else than 200. */; readonly status?: number };

export interface BrokerMaintenance {
  /** Both switches of `url`, a broker of `tenantId`. Never rejects. */
  read(url: string, tenantId: string): Promise<BrokerMaintenanceState>;
  /** Sets one switch, then reads both back. Never rejects. */
  set(url: string, tenantId: string, which: MaintenanceSwitch, enabled: boolean): Promise<BrokerMaintenanceState>;
}

const PATHS: Record<MaintenanceSwitch, string> = { push: '/api/v1/system/maintenance', pop: '/api/v1/system/maintenance/pop' };

/** The broker answered, with a status other than 200: it is up but refused or lacks the route. */
class BrokerAnswered extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The identity the edge mints broker tokens for when an operator calls a system route. */
function operatorIdentity(tenantId: string): Identity {
  return { token: '', sub: 'queen-edge-operator', roles: new Set(['admin']), tenant: tenantId, expMs: null, claims: {} };
}

export function createBrokerMaintenance(deps: { minter: UpstreamMinter | null; timeoutMs: number }): BrokerMaintenance {
  const call = async (url: string, tenantId: string, method: 'GET' | 'POST', path: string, body?: unknown): Promise<Record<string, unknown>> => {
    const headers: Record<string, string> = {};
    if (deps.minter) headers.authorization = await deps.minter.authorizationFor(operatorIdentity(tenantId), tenantId);
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await request(`${url}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(deps.timeoutMs),
    });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new BrokerAnswered(res.statusCode, `broker answered ${res.statusCode}${text ? `: ${text.slice(0, 200)}` : ''}`);
    return JSON.parse(text) as Record<string, unknown>;
  };
  const failure = (url: string, err: unknown): BrokerMaintenanceState =>
    err instanceof BrokerAnswered ? { url, error: err.message, status: err.status } : { url, error: `broker did not answer: ${(err as Error).message}` };

  const read = async (url: string, tenantId: string): Promise<BrokerMaintenanceState> => {
    try {
      const doc = await call(url, tenantId, 'GET', PATHS.push);
      return { url, maintenance: doc.maintenanceMode === true, popMaintenance: doc.popMaintenanceMode === true };
    } catch (err) {
      return failure(url, err);
    }
  };

  return {
    read,
    async set(url, tenantId, which, enabled) {
      try {
        await call(url, tenantId, 'POST', PATHS[which], { enabled });
      } catch (err) {
        return failure(url, err);
      }
      return read(url, tenantId);
    },
  };
}
