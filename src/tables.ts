/**
 * Compiles the validated configuration file into frozen runtime tables, refusing at load time
 * what the schema alone cannot see: tenant ids, plans and hosts are judged by the tenant
 * directory's one build. It sits above config/, tenants/ and routes/, which it joins, so none of
 * those folders imports another back.
 */
import { ConfigError } from './config/load.js';
import type { RawConfig } from './config/schema.js';
import type { Tenant } from './tenants/model.js';
import { BrokerAddresses, brokerUrlsOf } from './tenants/broker-addresses.js';
import { buildSnapshot, NO_RECORDS, type BrokerIdentities } from './tenants/snapshot.js';
import { queryAllowProblems } from './routes/query-params.js';
import { applyRouteOverrides, ROUTES, type RouteSpec } from './routes/table.js';

export interface CompiledTables {
  readonly tenants: readonly Tenant[];
  readonly routes: readonly RouteSpec[];
}

/** What the tables are compiled from: the file's directory and its route settings. */
export type TableSettings = Pick<RawConfig, 'plans' | 'tenants' | 'auth' | 'routes' | 'queryAllow'>;

/** The tables of `cfg`, brokers told apart by `identitiesOf` (their spelling alone by default). */
export function compileTables(cfg: TableSettings, identitiesOf?: BrokerIdentities): CompiledTables {
  const built = buildSnapshot({ plans: cfg.plans, tenants: cfg.tenants, auth: cfg.auth }, NO_RECORDS, undefined, identitiesOf);
  const problems = built.rejected.flatMap((r) => r.problems);
  const { routes, problems: routeProblems } = routeTables(cfg);
  problems.push(...routeProblems);
  if (problems.length > 0) throw new ConfigError(problems);
  return { tenants: [...built.snapshot.byId.values()], routes };
}

/**
 * compileTables once the host names of the file's brokers are resolved (within the lookup's time
 * bound), so two names of one broker are refused like two spellings: what start, `validate` and
 * every reload use. `addresses` keeps what was learnt for the running directory.
 */
export async function compileTablesResolved(cfg: TableSettings, addresses = new BrokerAddresses()): Promise<CompiledTables> {
  await addresses.learn(brokerUrlsOf(Object.values(cfg.tenants)));
  return compileTables(cfg, addresses.identitiesOf);
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
