/**
 * Compiles the validated file into frozen runtime tables (STYLE: decide once, at load time).
 */
import { ConfigError } from './load.js';
import type { RawConfig } from './schema.js';
import { compilePlan, compileTenant, type Plan, type Tenant } from '../tenants/model.js';
import { applyRouteOverrides, ROUTES, type RouteSpec } from '../routes/table.js';

export interface CompiledTables {
  readonly plans: ReadonlyMap<string, Plan>;
  readonly tenants: readonly Tenant[];
  readonly routes: readonly RouteSpec[];
}

export function compileTables(cfg: RawConfig): CompiledTables {
  const plans = new Map<string, Plan>();
  for (const [id, raw] of Object.entries(cfg.plans)) plans.set(id, compilePlan(id, raw));
  const tenants = Object.entries(cfg.tenants).map(([id, raw]) => compileTenant(id, raw, plans.get(raw.plan)!));
  const problems: string[] = [];
  const seenHosts = new Map<string, string>();
  for (const t of tenants) {
    for (const h of t.hosts) {
      const other = seenHosts.get(h);
      if (other !== undefined) problems.push(`tenants.${t.id}.hosts: host "${h}" is already listed by tenant "${other}"`);
      seenHosts.set(h, t.id);
    }
  }
  const { routes, problems: routeProblems } = applyRouteOverrides(ROUTES, cfg.routes);
  problems.push(...routeProblems);
  if (problems.length > 0) throw new ConfigError(problems);
  return { plans, tenants, routes };
}
