/**
 * The docs advise only settings the product accepts: every YAML snippet in docs/ and the READMEs
 * passes the configuration schema (laid over a minimal valid configuration), every setting they
 * name in backticks (`server.trustedProxies`, `tenants.<id>.auth`) is a key the schema knows (it
 * refuses unknown keys), and a setting refused at start is only mentioned as refused.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parse } from 'yaml';
import type { z } from 'zod';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config/load.js';
import { configSchema } from '../../src/config/schema.js';
import { merge, TEST_PLAN } from '../helpers/edge.js';

const ROOT = resolve(import.meta.dirname, '../..');
const DOCS = [
  'README.md',
  'helm/queen-edge/README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const text = (file: string): string => readFileSync(join(ROOT, file), 'utf8');

/** Settings the schema refuses at start, and words a line must use when it names one. */
const REFUSED: ReadonlyArray<{ key: string; config: Record<string, unknown>; said: RegExp }> = [
  { key: 'trustProxy', config: { server: { trustProxy: true } }, said: /refused|deprecated|config error|replaced/i },
];

type Json = Record<string, unknown>;

/** The smallest configuration that starts; snippets are laid over it (their plans `free` and `pro` exist). */
const BASE: Json = { auth: { secret: 'docs-test-secret-0123456789abcdef' }, plans: { free: TEST_PLAN, pro: TEST_PLAN }, tenants: {} };

/** Every fenced YAML block of `file`, with its line. */
function yamlBlocks(file: string): Array<{ line: number; doc: Json }> {
  const s = text(file);
  return [...s.matchAll(/```ya?ml\n([\s\S]*?)```/g)].map((m) => ({ line: s.slice(0, m.index).split('\n').length, doc: parse(m[1]!) as Json }));
}

/** The schema under defaults, optionals, nullables and pipes. */
function unwrap(schema: z.ZodType): z.ZodType {
  const def = (schema as unknown as { _zod: { def: { type: string; innerType?: z.ZodType; in?: z.ZodType } } })._zod.def;
  if (def.innerType) return unwrap(def.innerType);
  if (def.type === 'pipe' && def.in) return unwrap(def.in);
  return schema;
}

/** Whether the dotted setting path names a key the schema has (`<id>`-like segments stand for any record key or index). */
function known(path: string): boolean {
  let schema: z.ZodType = configSchema;
  for (const segment of path.split('.')) {
    // `upstream.*`: the whole section.
    if (segment === '*') return true;
    const s = unwrap(schema);
    const def = (s as unknown as { _zod: { def: { type: string; shape?: Record<string, z.ZodType>; valueType?: z.ZodType; element?: z.ZodType } } })._zod.def;
    const name = segment.replace(/\[[^\]]*\]$/, '');
    if (def.type === 'object') {
      const next = def.shape![name];
      if (next === undefined) return false;
      schema = next;
    } else if (def.type === 'record') schema = def.valueType!;
    else return false;
    if (segment.endsWith(']')) {
      const arr = (unwrap(schema) as unknown as { _zod: { def: { type: string; element?: z.ZodType } } })._zod.def;
      if (arr.type !== 'array') return false;
      schema = arr.element!;
    }
  }
  return true;
}

/** Backticked setting paths: `server.x`, `config.server.x` (Helm values), `tenants.<id>.auth`, `redis.url: ...`. */
function settingPaths(file: string): Array<{ line: number; path: string }> {
  const sections = Object.keys((unwrap(configSchema) as unknown as { shape: Record<string, unknown> }).shape).join('|');
  const re = new RegExp(`\`(?:config\\.)?((?:${sections})(?:\\.[A-Za-z0-9_<>*\\[\\]-]+)+)`, 'g');
  return text(file)
    .split('\n')
    .flatMap((l, i) => [...l.matchAll(re)].map((m) => ({ line: i + 1, path: m[1]!.replace(/\.$/, '') })));
}

describe('settings the docs advise', () => {
  it('every YAML snippet passes the schema over a minimal configuration', () => {
    const blocks = DOCS.flatMap((file) => yamlBlocks(file).map((b) => ({ ...b, file })));
    expect(blocks.length).toBeGreaterThan(5);
    for (const b of blocks) {
      let problems: readonly string[] = [];
      try {
        parseConfig(merge(BASE, b.doc), {});
      } catch (err) {
        if (!(err instanceof ConfigError)) throw err;
        problems = err.problems;
      }
      expect(problems, `${b.file}:${b.line}`).toEqual([]);
    }
  });

  it('every setting named in backticks is a key of the schema', () => {
    const named = DOCS.flatMap((file) => settingPaths(file).map((p) => ({ ...p, file })));
    expect(named.length).toBeGreaterThan(50);
    const unknown = named.filter((p) => !known(p.path)).map((p) => `${p.file}:${p.line} ${p.path}`);
    expect(unknown).toEqual([]);
  });

  it('a setting refused at start is mentioned only as refused', () => {
    for (const r of REFUSED) {
      // The list is the schema's: each entry really is refused.
      expect(() => parseConfig(merge(BASE, r.config), {}), r.key).toThrow(ConfigError);
      const lines = DOCS.flatMap((file) => {
        const all = text(file).split('\n');
        return all.map((l, i) => ({ where: `${file}:${i + 1}`, l, next: all[i + 1] ?? '' })).filter((x) => x.l.includes(r.key));
      });
      expect(lines.length, r.key).toBeGreaterThan(0);
      // The sentence may wrap: the line or the next one says so.
      expect(lines.filter((x) => !r.said.test(x.l + x.next)).map((x) => `${x.where}: ${x.l.trim()}`)).toEqual([]);
    }
  });
});
