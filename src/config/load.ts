/**
 * Reads the configuration (YAML, or JSON for a `.json` file), substitutes `${VAR}` /
 * `${VAR:-default}` from the environment, and validates it against the schema. Every problem is
 * reported with its path, and with the variable it came from; a value taken from the environment
 * never appears in a message.
 */
import { readFile } from 'node:fs/promises';
import { Worker } from 'node:worker_threads';
import { isMap, isScalar, parseDocument, visit, type Document } from 'yaml';
import type { z } from 'zod';
import { withTracingEnv } from './tracing-env.js';
import { configSchema, type RawConfig } from './schema.js';
import { TenantsJoin } from './parts.js';
import { tenantIds } from './tenant-ids.js';
import { tenantTexts } from './tenant-texts.js';
import type { ReadRequest } from './read-worker.js';

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
  // A container is copied only when something inside it was substituted (coerceWanted then edits
  // the copy): a file of 100,000 tenants has few variables, and copying every object doubled its cost.
  if (Array.isArray(value)) {
    let out: unknown[] | null = null;
    for (let i = 0; i < value.length; i++) {
      const v = substituteEnv(value[i], env, problems, `${path}[${i}]`, origins);
      if (v === value[i]) continue;
      out ??= value.slice();
      out[i] = v;
    }
    return out ?? value;
  }
  if (value !== null && typeof value === 'object') {
    let out: Record<string, unknown> | null = null;
    for (const k in value) {
      const v = (value as Record<string, unknown>)[k];
      const s = substituteEnv(v, env, problems, path ? `${path}.${k}` : k, origins);
      if (s === v) continue;
      out ??= { ...value };
      out[k] = s;
    }
    return out ?? value;
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
  const tracing = withTracingEnv(result.data.tracing, env, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return { ...result.data, tracing };
}

/**
 * Reads, substitutes and validates a configuration file: JSON.parse for a `.json` file, the YAML
 * parser otherwise. Both report a syntax error and a key given twice in one mapping with the
 * file's name; from the parsed tree on, both take the same path (parseConfig).
 */
export async function loadConfigFile(path: string, env: NodeJS.ProcessEnv = process.env): Promise<RawConfig> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new ConfigError([`${path}: ${(err as Error).message}`]);
  }
  return parseConfig(/\.json$/i.test(path) ? readJson(path, text) : readYaml(path, text), env);
}

/** A reader thread; `exited` once it is gone, so a read queued on it fails instead of waiting for an answer that cannot come. */
interface ReaderThread {
  readonly worker: Worker;
  queue: Promise<unknown>;
  exited: boolean;
}

/** The reader thread, started by keepForReloads or on first use and kept (unref'd) for later reloads; reads run one at a time. */
let reader: ReaderThread | null = null;

/** The running reader thread's worker, if any (tests end it to see the reads queued on it fail). */
export function configReader(): Worker | null {
  return reader?.worker ?? null;
}

function readerThread(): ReaderThread {
  if (reader !== null) return reader;
  // The same extension as this module: .js built; .ts when run from source, where the worker
  // registers tsx itself (a worker does not inherit the loader hooks of --import).
  const ext = import.meta.url.slice(import.meta.url.lastIndexOf('.'));
  const entry = new URL(`./read-worker${ext}`, import.meta.url).href;
  // tsx is found from this module, not from the working directory (an eval'd worker resolves from there).
  const tsx = ext === '.ts' ? JSON.stringify(import.meta.resolve('tsx/esm/api')) : null;
  const boot = `(async () => { if (${tsx !== null}) (await import(${tsx})).register(); await import(${JSON.stringify(entry)}); })()`;
  const worker = new Worker(boot, { eval: true });
  worker.unref();
  const started: ReaderThread = { worker, queue: Promise.resolve(), exited: false };
  worker.on('error', () => {});
  // The next read starts a new thread.
  worker.on('exit', () => {
    started.exited = true;
    if (reader === started) reader = null;
  });
  reader = started;
  return started;
}

/** The tenants of the last read delivered (or kept by keepForReloads), and their text: the reader sends the next read as the changes from them. */
let lastRead: { tenants: RawConfig['tenants']; texts: SharedArrayBuffer } | null = null;

/**
 * The tenants a process starts with, kept (as text, tenant-texts.ts) for its first reload's read,
 * which the reader thread then sends as the changes from them. Pass the tenants as loadConfigFile
 * returned them: what a read returns is compared with that. A few hundred milliseconds at
 * 100,000 tenants, once, before serving. The reader thread starts now too, idle until a reload:
 * started by the SIGHUP, its own start (an isolate, its modules, from source their compilation)
 * took CPU from the serving thread just when the read was about to.
 */
export function keepForReloads(tenants: RawConfig['tenants']): void {
  lastRead = { tenants, texts: tenantTexts(tenants, tenantIds(tenants)) };
  readerThread();
}

/** A message of the reader thread (read-worker.ts). */
interface ReaderMessage {
  type: 'head' | 'tenants' | 'done' | 'error';
  config?: Omit<RawConfig, 'tenants'>;
  /** head: whether this read is sent against the last (its tenants missing from `part` are that read's). */
  base?: boolean;
  ids?: string[];
  part?: RawConfig['tenants'];
  /** done: the tenants added, changed or removed since the last read; null when not sent against it. */
  changed?: string[] | null;
  /** done: this read's tenantTexts. */
  texts?: SharedArrayBuffer;
  problems?: string[] | null;
  message?: string;
}

/**
 * loadConfigFile on a worker thread: a reload (SIGHUP) reads the file while this thread serves
 * requests (parsing and validating 100,000 tenants takes seconds). The result arrives in chunks,
 * each taken in on its own event-loop turn; a tenant equal to the last read's is that read's
 * object, not a copy, and the changed ones are remembered (tenant-ids.ts, changesOf) so the
 * directory compares nothing itself.
 */
export function loadConfigFileOffThread(path: string, env: NodeJS.ProcessEnv = process.env): Promise<RawConfig> {
  const thread = readerThread();
  const read = thread.queue
    .catch(() => {})
    .then(
      () =>
        new Promise<RawConfig>((resolve, reject) => {
          const { worker } = thread;
          if (thread.exited) {
            reject(new Error('configuration reader thread exited before this read began; the next read starts a new one'));
            return;
          }
          const prior = lastRead;
          let head: Omit<RawConfig, 'tenants'> | null = null;
          let join = new TenantsJoin({});
          const done = (): void => {
            worker.off('message', onMessage);
            worker.off('error', reject);
            worker.off('exit', onExit);
          };
          const onExit = (code: number): void => {
            done();
            reject(new Error(`configuration reader thread exited with code ${code} during the read; the next read starts a new one`));
          };
          const onMessage = (m: ReaderMessage): void => {
            if (m.type === 'head') {
              head = m.config!;
              if (m.base === true) join = new TenantsJoin(prior!.tenants);
            } else if (m.type === 'tenants') {
              join.add({ ids: m.ids!, tenants: m.part! });
              // The next chunk after a turn of the event loop: requests are served between chunks.
              setImmediate(() => worker.postMessage({ type: 'next' }));
            } else {
              done();
              if (m.type === 'done') {
                const tenants = join.tenants(m.changed ?? null);
                lastRead = { tenants, texts: m.texts! };
                resolve({ ...head!, tenants });
              } else reject(m.problems ? new ConfigError(m.problems) : new Error(m.message));
            }
          };
          worker.on('message', onMessage);
          worker.on('error', reject);
          worker.on('exit', onExit);
          const request: ReadRequest = { type: 'read', path, env: { ...env }, base: prior?.texts ?? null };
          worker.postMessage(request);
        }),
    );
  thread.queue = read;
  return read;
}

/** The tree of a JSON text; a syntax error or a duplicate key is a ConfigError naming the file. */
function readJson(path: string, text: string): unknown {
  let tree: unknown;
  try {
    tree = JSON.parse(text);
  } catch (err) {
    throw new ConfigError([`${path}: ${(err as Error).message}`]);
  }
  // JSON.parse keeps the last of two equal keys silently, where YAML refuses them: a tenant listed
  // twice in a generated file would otherwise lose its first entry unnoticed.
  const dup = duplicateJsonKey(text);
  if (dup) throw new ConfigError([`${path}: ${dup.path || '(root)'}: key "${dup.key}" given twice`]);
  return tree;
}

/**
 * The first key given twice in one object of a valid JSON text, with the path of that object;
 * null when none. One pass over the text: the YAML parser's own check compares each key with every
 * earlier one of its mapping, quadratic in a mapping of 100,000 tenants.
 */
export function duplicateJsonKey(text: string): { path: string; key: string } | null {
  // One frame per open object or array: the keys seen (null for an array) and the frame's path.
  const stack: { keys: Set<string> | null; path: string; index: number }[] = [];
  let expectKey = false;
  let lastKey = '';
  const childPath = (): string => {
    const top = stack[stack.length - 1];
    if (top === undefined) return '';
    if (top.keys === null) return `${top.path}[${top.index}]`;
    return top.path ? `${top.path}.${lastKey}` : lastKey;
  };
  const structural = /["{}[\],]/g;
  for (let m = structural.exec(text); m !== null; m = structural.exec(text)) {
    const i = m.index;
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      let end = i + 1;
      for (;;) {
        const q = text.indexOf('"', end);
        let slashes = 0;
        while (text.charCodeAt(q - 1 - slashes) === 92 /* \\ */) slashes++;
        end = q + 1;
        if (slashes % 2 === 0) break;
      }
      if (expectKey) {
        const raw = text.slice(i + 1, end - 1);
        const key = raw.includes('\\') ? (JSON.parse(text.slice(i, end)) as string) : raw;
        const keys = stack[stack.length - 1]!.keys!;
        if (keys.has(key)) return { path: stack[stack.length - 1]!.path, key };
        keys.add(key);
        lastKey = key;
        expectKey = false;
      }
      structural.lastIndex = end;
    } else if (c === 123 /* { */) {
      stack.push({ keys: new Set(), path: childPath(), index: 0 });
      expectKey = true;
    } else if (c === 91 /* [ */) {
      stack.push({ keys: null, path: childPath(), index: 0 });
    } else if (c === 125 /* } */ || c === 93 /* ] */) {
      stack.pop();
      expectKey = false;
    } else if (c === 44 /* , */) {
      const top = stack[stack.length - 1]!;
      if (top.keys === null) top.index++;
      else expectKey = true;
    }
  }
  return null;
}

/** The tree of a YAML text; a syntax error or a duplicate key is a ConfigError naming the file. */
function readYaml(path: string, text: string): unknown {
  // The parser's own duplicate-key check is quadratic in a mapping's size (minutes for 100,000
  // tenants): it is off here, and duplicateYamlKey checks every mapping in one pass instead.
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: false });
  if (doc.errors.length > 0) {
    // After a syntax error the parser is lost: the errors that follow it only echo the first.
    throw new ConfigError([`${path}: ${doc.errors[0]!.message.trimEnd()}`]);
  }
  const dup = duplicateYamlKey(doc, text);
  if (dup) throw new ConfigError([`${path}: ${dup}`]);
  return doc.toJS();
}

/** The parser's message for the first mapping key given twice (equal scalar values, as the parser compares them); null when none. */
function duplicateYamlKey(doc: Document, text: string): string | null {
  let found: string | null = null;
  visit(doc, {
    Map(_key, map) {
      if (!isMap(map)) return undefined;
      const seen = new Set<unknown>();
      for (const pair of map.items) {
        if (!isScalar(pair.key)) continue;
        if (!seen.has(pair.key.value)) {
          seen.add(pair.key.value);
          continue;
        }
        const at = pair.key.range?.[0] ?? 0;
        const before = text.slice(0, at);
        const line = before.split('\n').length;
        found = `Map keys must be unique at line ${line}, column ${at - before.lastIndexOf('\n')}: ${String(pair.key.value)}`;
        return visit.BREAK;
      }
      return undefined;
    },
  });
  return found;
}
