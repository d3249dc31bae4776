/**
 * Compiles the validated configuration file into frozen runtime tables, refusing at load time
 * what the schema alone cannot see: tenant ids, plans and hosts are judged by the tenant
 * directory's one build. It sits above config/, tenants/ and routes/, which it joins, so none of
 * those folders imports another back.
 */
import { ConfigError } from './config/load.js';
import type { RawConfig } from './config/schema.js';
import type { Tenant } from './tenants/model.js';
import { buildSnapshot, NO_RECORDS } from './tenants/snapshot.js';
import { queryAllowProblems } from './routes/query-params.js';
import { applyRouteOverrides, ROUTES, type RouteSpec } from './routes/table.js';

export interface CompiledTables {
  readonly tenants: readonly Tenant[];
  readonly routes: readonly RouteSpec[];
}

/** What the tables are compiled from: the file's directory and its route settings. */
export type TableSettings = Pick<RawConfig, 'plans' | 'tenants' | 'auth' | 'routes' | 'queryAllow'>;

export function compileTables(cfg: TableSettings): CompiledTables {
  const built = buildSnapshot({ plans: cfg.plans, tenants: cfg.tenants, auth: cfg.auth }, NO_RECORDS);
  const problems = built.rejected.flatMap((r) => r.problems);
  const { routes, problems: routeProblems } = routeTables(cfg);
  problems.push(...routeProblems);
  if (problems.length > 0) throw new ConfigError(problems);
  return { tenants: [...built.snapshot.byId.values()], routes };
}

/** The route table alone (a reload: the tenant directory checks the tenants itself, placing only those that changed). */
export function compileRouteTables(cfg: Pick<TableSettings, 'routes' | 'queryAllow'>): readonly RouteSpec[] {
  const { routes, problems } = routeTables(cfg);
  if (problems.length > 0) throw new ConfigError(problems);
  return routes;
}

function routeTables(cfg: Pick<TableSettings, 'routes' | 'queryAllow'>): { routes: readonly RouteSpec[]; problems: string[] } {
  const { routes, problems } = applyRouteOverrides(ROUTES, cfg.routes);
  return { routes, problems: [...problems, ...queryAllowProblems(cfg.queryAllow, new Set(routes.map((r) => r.name)))] };
}
