/**
 * Reads the YAML configuration, substitutes `${VAR}` / `${VAR:-default}` from the environment,
 * and validates it against the schema. Every problem is reported with its path.
 */
import { readFile } from 'node:fs/promises';
import { parse as parseYaml, parseDocument } from 'yaml';
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

/**
 * Replaces variables in every string of a parsed document. A value that is exactly one
 * variable is re-read as a YAML scalar, so `port: ${PORT:-8443}` stays a number and an empty
 * `${X:-}` becomes null rather than "".
 */
export function substituteEnv(value: unknown, env: NodeJS.ProcessEnv, problems: string[], path = ''): unknown {
  if (typeof value === 'string') {
    const whole = WHOLE_VAR.exec(value);
    if (whole) {
      const resolved = resolveVar(whole[1]!, whole[2], env, problems, path);
      return resolved === '' ? null : parseYaml(resolved) ?? null;
    }
    return value.replace(ANY_VAR, (_m, name: string, def: string | undefined) => resolveVar(name, def, env, problems, path));
  }
  if (Array.isArray(value)) return value.map((v, i) => substituteEnv(v, env, problems, `${path}[${i}]`));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = substituteEnv(v, env, problems, path ? `${path}.${k}` : k);
    return out;
  }
  return value;
}

function resolveVar(name: string, def: string | undefined, env: NodeJS.ProcessEnv, problems: string[], path: string): string {
  const v = env[name];
  if (v !== undefined && v !== '') return v;
  if (def !== undefined) return def;
  problems.push(`${path || '(root)'}: environment variable ${name} is not set and has no default`);
  return '';
}

/** Validates an already-parsed document (used by tests and by loadConfigFile). */
export function parseConfig(doc: unknown, env: NodeJS.ProcessEnv = process.env): RawConfig {
  const problems: string[] = [];
  const substituted = substituteEnv(doc ?? {}, env, problems);
  const result = configSchema.safeParse(substituted);
  if (!result.success) {
    for (const issue of result.error.issues) {
      const p = issue.path.map((s) => (typeof s === 'number' ? `[${s}]` : String(s))).join('.').replace(/\.\[/g, '[');
      problems.push(`${p || '(root)'}: ${issue.message}`);
    }
  }
  if (problems.length > 0 || !result.success) throw new ConfigError(problems);
  return result.data;
}

/** Reads, substitutes and validates a YAML file. */
export async function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): Promise<RawConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`${path}: ${(err as Error).message}`]);
  }
  const doc = parseDocument(text, { prettyErrors: true });
  if (doc.errors.length > 0) throw new ConfigError(doc.errors.map((e) => `${path}: ${e.message}`));
  return parseConfig(doc.toJS(), env);
}
