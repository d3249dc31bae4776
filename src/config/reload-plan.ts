/**
 * What a configuration reload (SIGHUP) does with each setting (docs/operating.md, "Reloading the
 * configuration"): a setting is either applied by every process without a restart, or named, by its
 * path, as needing one. Pure, so one process and every cluster worker report a reload alike.
 */
import type { RawConfig } from './schema.js';

/**
 * Settings a reload applies, as dotted paths (a path covers everything under it). Everything
 * else is built once at start: listeners' addresses and options, Redis, limits, pools, the log.
 */
export const RELOADABLE: readonly string[] = [
  'tenants',
  'plans',
  'routes',
  // Tenant API keys declared by their hash: the key verifier's file keys are replaced.
  'apiKeys',
  'server.admin.token',
  // A new certificate set is loaded and swapped into the running HTTPS listener.
  'server.https.cert',
  'server.https.key',
  'server.https.sni',
  // Everything the token verifiers read: the global verifier is rebuilt (and PEM files read again).
  'auth.algorithms',
  'auth.secret',
  'auth.publicKey',
  'auth.jwksUrl',
  'auth.issuer',
  'auth.audience',
  'auth.clockToleranceSec',
  'auth.rolesClaim',
  'auth.roleClaim',
  'auth.requireExp',
  'auth.maxTokenAgeSec',
  'auth.maxTokenBytes',
  'auth.cacheSize',
  'auth.cacheBytes',
  'auth.tenantCacheBytes',
  // And redis.url when only its user name or password changed (credentialsOnly).
];

/** Maps keyed by ids (not by setting names): compared whole, so a path never names a tenant's field. */
const WHOLE = new Set(['tenants', 'plans', 'routes', 'queryAllow']);

type Tree = Record<string, unknown>;

function isTree(v: unknown): v is Tree {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

/**
 * Tenants are compared by the directory, tenant by tenant, in slices that yield to the event loop
 * (tenants/store.ts, diffFile): with 100,000 of them one comparison here would hold every request.
 */
const COMPARED_BY_THE_DIRECTORY = 'tenants';

/**
 * Dotted paths of the settings whose values differ (arrays and id-keyed maps compared whole), in
 * schema order; `tenants` is left to the directory.
 */
export function changedPaths(a: unknown, b: unknown, path = ''): string[] {
  if (path === COMPARED_BY_THE_DIRECTORY) return [];
  if (isTree(a) && isTree(b) && !WHOLE.has(path)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    return keys.flatMap((k) => changedPaths(a[k], b[k], path ? `${path}.${k}` : k));
  }
  return JSON.stringify(a) === JSON.stringify(b) ? [] : [path];
}

/** Whether a reload applies the setting at `path`. */
export function reloadable(path: string): boolean {
  return RELOADABLE.some((r) => path === r || path.startsWith(`${r}.`));
}

/** Two Redis URLs that differ only in their user name and password (a rotation): the same server, the same database. */
export function credentialsOnly(a: string | null, b: string | null): boolean {
  if (a === null || b === null) return false;
  const bare = (url: string): string | null => {
    try {
      const u = new URL(url);
      u.username = '';
      u.password = '';
      return u.href;
    } catch {
      return null;
    }
  };
  return bare(a) !== null && bare(a) === bare(b);
}

/** Whether a reload from `from` to `to` applies the change at `path`: reloadable settings, and new Redis credentials. */
function appliedChange(path: string, from: RawConfig, to: RawConfig): boolean {
  return reloadable(path) || (path === 'redis.url' && credentialsOnly(from.redis.url, to.redis.url));
}

export interface ReloadPlan {
  /** Settings that changed since the last reload and take effect now. */
  readonly applied: readonly string[];
  /** Settings whose file value differs from what runs since the start: they take effect at the next restart. */
  readonly restartNeeded: readonly string[];
}

/** What reloading `next` does in a process started with `started` and running `current` (the last applied file). */
export function planReload(started: RawConfig, current: RawConfig, next: RawConfig): ReloadPlan {
  return {
    applied: changedPaths(current, next).filter((p) => appliedChange(p, current, next)),
    restartNeeded: changedPaths(started, next).filter((p) => !appliedChange(p, started, next)),
  };
}

/**
 * The configuration that runs after reloading `next` into a process started with `started`: the
 * reloadable settings from `next`, the others as started. A worker forked after a reload starts
 * with it, so it serves exactly as the workers that reloaded.
 */
export function runningConfig(started: RawConfig, next: RawConfig): RawConfig {
  // Tenants always come from `next` (a reload applies them): shared, not copied.
  const out: Tree = { ...(structuredClone({ ...next, tenants: {} }) as unknown as Tree), tenants: next.tenants };
  for (const path of changedPaths(started, next)) {
    if (appliedChange(path, started, next)) continue;
    const keys = path.split('.');
    const last = keys.pop()!;
    let from = started as unknown as Tree;
    let to = out;
    for (const k of keys) {
      from = from[k] as Tree;
      to = to[k] as Tree;
    }
    if (last in from) to[last] = structuredClone(from[last]);
    else delete to[last];
  }
  return out as unknown as RawConfig;
}
