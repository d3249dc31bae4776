/**
 * Reads the YAML configuration, substitutes `${VAR}` / `${VAR:-default}` from the environment,
 * and validates it against the schema. Every problem is reported with its path, and with the
 * variable it came from; a value taken from the environment never appears in a message.
 */
import { readFile } from 'node:fs/promises';
import { parseDocument } from 'yaml';
import type { z } from 'zod';
import { configSchema, type RawConfig } from './schema.js';

/** A configuration that cannot be used; `problems` lists each as `path: message`. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
  }
}

const WHOLE_VAR = /^\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}$/;
const ANY_VAR = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/** Where a substituted string came from: the variables, the values the environment gave them, and whether the scalar was exactly one variable. */
export interface EnvOrigin {
  vars: string[];
  /** Values read from the environment (not defaults written in the file): what must never be printed. */
  secrets: string[];
  whole: boolean;
}

/**
 * Replaces variables in every string of a parsed document. The result is always a string (a
 * secret such as `*x`, `!x`, `a #b` or `0123` stays exactly as given) except that an empty
 * whole-value variable (`${X:-}`) becomes null; parseConfig turns a whole-value variable into a
 * number or boolean only where the schema asks for one. `origins` collects each substituted path.
 */
export function substituteEnv(value: unknown, env: NodeJS.ProcessEnv, problems: string[], path = '', origins = new Map<string, EnvOrigin>()): unknown {
  if (typeof value === 'string') {
    if (!value.includes('${')) return value;
    const origin: EnvOrigin = { vars: [], secrets: [], whole: WHOLE_VAR.test(value) };
    const out = value.replace(ANY_VAR, (_m, name: string, def: string | undefined) => {
      origin.vars.push(name);
      const v = env[name];
      if (v !== undefined && v !== '') {
        origin.secrets.push(v);
        return v;
      }
      if (def !== undefined) return def;
      problems.push(`${path || '(root)'}: environment variable ${name} is ${v === undefined ? 'not set' : 'empty'} and has no default`);
      return '';
    });
    if (origin.vars.length === 0) return value;
    origins.set(path, origin);
    return origin.whole && out === '' ? null : out;
  }
  if (Array.isArray(value)) return value.map((v, i) => substituteEnv(v, env, problems, `${path}[${i}]`, origins));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = substituteEnv(v, env, problems, path ? `${path}.${k}` : k, origins);
    return out;
  }
  return value;
}

function pathKey(path: readonly PropertyKey[]): string {
  return path
    .map((s) => (typeof s === 'number' ? `[${s}]` : String(s)))
    .join('.')
    .replace(/\.\[/g, '[');
}

const NUMBER = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/** The typed value of a whole-variable string where the schema wanted a number or boolean; undefined when it is not one. */
function coerce(text: string, expected: string): number | boolean | undefined {
  if (expected === 'number') return NUMBER.test(text.trim()) ? Number(text) : undefined;
  if (expected === 'boolean') return text === 'true' ? true : text === 'false' ? false : undefined;
  return undefined;
}

/** Replaces, in place, each whole-variable string the schema refused for want of a number or boolean; true when any changed. */
function coerceWanted(tree: unknown, issues: readonly z.core.$ZodIssue[], origins: ReadonlyMap<string, EnvOrigin>): boolean {
  let changed = false;
  for (const issue of issues) {
    if (issue.code !== 'invalid_type' || !origins.get(pathKey(issue.path))?.whole) continue;
    let parent = tree as Record<PropertyKey, unknown>;
    for (const seg of issue.path.slice(0, -1)) parent = parent[seg] as Record<PropertyKey, unknown>;
    const last = issue.path[issue.path.length - 1]!;
    const typed = typeof parent[last] === 'string' ? coerce(parent[last], issue.expected) : undefined;
    if (typed === undefined) continue;
    parent[last] = typed;
    changed = true;
  }
  return changed;
}

/** `path: message`, naming the variables a substituted value came from and hiding their values. */
function problemText(path: string, message: string, origin: EnvOrigin | undefined): string {
  if (!origin) return `${path || '(root)'}: ${message}`;
  let safe = message;
  for (const secret of origin.secrets) safe = safe.split(secret).join('***');
  return `${path} (from ${origin.vars.map((v) => `\${${v}}`).join(', ')}): ${safe}`;
}

/** Validates an already-parsed document (used by tests and by loadConfigFile). */
export function parseConfig(doc: unknown, env: NodeJS.ProcessEnv = process.env): RawConfig {
  const problems: string[] = [];
  const origins = new Map<string, EnvOrigin>();
  const substituted = substituteEnv(doc ?? {}, env, problems, '', origins);
  let result = configSchema.safeParse(substituted);
  if (!result.success && coerceWanted(substituted, result.error.issues, origins)) result = configSchema.safeParse(substituted);
  if (!result.success) {
    // A variable already reported as missing is not reported again as a value of the wrong type.
    const missing = new Set(problems.map((p) => p.slice(0, p.indexOf(': '))));
    for (const issue of result.error.issues) {
      const p = pathKey(issue.path);
      if (!missing.has(p)) problems.push(problemText(p, issue.message, origins.get(p)));
    }
  }
  if (problems.length > 0 || !result.success) throw new ConfigError(problems);
  return result.data;
}

/** Reads, substitutes and validates a YAML file, with its key files read in (key-files.ts). */
export async function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): Promise<RawConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`${path}: ${(err as Error).message}`]);
  }
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length > 0) {
    // After a syntax error the parser is lost: the errors that follow it only echo the first.
    throw new ConfigError([`${path}: ${doc.errors[0]!.message.trimEnd()}`]);
  }
  // Key files named in it are checked by the preflight (src/preflight.ts) and read when the
  // configuration is applied (src/auth/key-files.ts).
  return parseConfig(doc.toJS(), env);
}
