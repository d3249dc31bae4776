/**
 * Docker cannot build here, so the Dockerfile's instructions are checked against the project:
 * what it copies exists, what it runs is what `npm run build` produces, the ports, user, health
 * check and config path agree with config/default.yaml and the CLI.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';

const ROOT = resolve(import.meta.dirname, '../..');
const read = (p: string): string => readFileSync(join(ROOT, p), 'utf8');

interface Instruction {
  op: string;
  args: string;
}

/** Instructions of a Dockerfile: comments dropped, `\` continuations joined. */
function instructions(text: string): Instruction[] {
  const joined = text.split('\n').filter((l) => !/^\s*#/.test(l)).join('\n').replace(/\\\n/g, ' ');
  return joined.split('\n').map((l) => l.trim()).filter(Boolean).map((l) => {
    const [op, ...rest] = l.split(/\s+/);
    return { op: op!.toUpperCase(), args: rest.join(' ') };
  });
}

/** Splits instructions into stages at each FROM. */
function stages(all: Instruction[]): Instruction[][] {
  const out: Instruction[][] = [];
  for (const i of all) {
    if (i.op === 'FROM') out.push([]);
    out.at(-1)?.push(i);
  }
  return out;
}

const dockerfile = instructions(read('Dockerfile'));
const [build, runtime] = stages(dockerfile);
const defaults = parseConfig(parse(read('config/default.yaml')), {});
const tsBuild = JSON.parse(read('tsconfig.build.json')) as { compilerOptions: { rootDir: string; outDir: string } };

/** `["a", "b"]` exec form as an array. */
function execForm(args: string): string[] {
  return JSON.parse(args) as string[];
}

describe('Dockerfile', () => {
  it('has a build stage and a runtime stage', () => {
    expect(stages(dockerfile)).toHaveLength(2);
    expect(build![0]!.args).toMatch(/ AS build$/);
  });

  it('copies from the build context only files that exist', () => {
    const copies = dockerfile.filter((i) => i.op === 'COPY' && !i.args.startsWith('--from'));
    expect(copies.length).toBeGreaterThan(0);
    for (const c of copies) {
      const parts = c.args.split(/\s+/).filter((p) => !p.startsWith('--'));
      for (const src of parts.slice(0, -1)) expect(existsSync(join(ROOT, src)), `${src} (COPY ${c.args})`).toBe(true);
    }
  });

  it('builds with npm ci and the build script, and installs production dependencies only at runtime', () => {
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    const buildRuns = build!.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(buildRuns).toContainEqual(expect.stringMatching(/^npm ci\b/));
    expect(buildRuns).toContain('npm run build');
    expect(pkg.scripts.build).toBe('tsc -p tsconfig.build.json');
    const runtimeRuns = runtime!.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(runtimeRuns).toContainEqual(expect.stringMatching(/^npm ci --omit=dev\b/));
  });

  it('runs the compiled CLI: the entry maps back to src/cli.ts through tsconfig.build.json', () => {
    const entry = execForm(runtime!.find((i) => i.op === 'ENTRYPOINT')!.args);
    expect(entry[0]).toBe('node');
    const script = entry[1]!;
    const outDir = tsBuild.compilerOptions.outDir;
    // The runtime stage copies the build stage's outDir; the script must live under it.
    expect(runtime!.some((i) => i.op === 'COPY' && i.args === `--from=build /app/${outDir} ./${outDir}`)).toBe(true);
    const rel = relative(outDir, script);
    expect(rel.startsWith('..')).toBe(false);
    const source = join(tsBuild.compilerOptions.rootDir, rel.replace(/\.js$/, '.ts'));
    expect(existsSync(join(ROOT, source)), source).toBe(true);
    const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string> };
    expect(pkg.bin['queen-edge']).toBe(script);
  });

  it('exposes the ports of config/default.yaml', () => {
    const exposed = runtime!.filter((i) => i.op === 'EXPOSE').flatMap((i) => i.args.split(/\s+/)).map(Number).sort();
    expect(exposed).toEqual([defaults.server.https.port, defaults.server.admin.port].sort());
  });

  it('runs as a non-root user', () => {
    const user = runtime!.filter((i) => i.op === 'USER').at(-1)?.args;
    expect(user).toBeDefined();
    expect(['root', '0']).not.toContain(user!.split(':')[0]);
  });

  it('health-checks the admin /livez on the admin port of the default config', () => {
    const check = runtime!.find((i) => i.op === 'HEALTHCHECK')!.args;
    expect(check).toContain(`http://${defaults.server.admin.host}:${defaults.server.admin.port}/livez`);
  });

  it('reads its config from /etc/queen-edge/config.yaml and has /etc/queen-edge/tls for certificates', () => {
    const env = runtime!.filter((i) => i.op === 'ENV').map((i) => i.args).join(' ');
    expect(env).toContain('QUEEN_EDGE_CONFIG=/etc/queen-edge/config.yaml');
    expect(runtime!.some((i) => i.op === 'COPY' && i.args === 'config/default.yaml /etc/queen-edge/config.yaml')).toBe(true);
    expect(runtime!.some((i) => i.op === 'RUN' && i.args.includes('mkdir -p /etc/queen-edge/tls'))).toBe(true);
  });
});
