/**
 * Docker cannot build here, so the Dockerfile's instructions are checked against the project:
 * what it copies exists, what it runs is what `npm run build` produces, the ports, user, health
 * check and config path agree with the config the image carries (config/docker.yaml) and the CLI.
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
  const joined = text
    .split('\n')
    .filter((l) => !/^\s*#/.test(l))
    .join('\n')
    .replace(/\\\n/g, ' ');
  return joined
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
    .map((l) => {
      const [op, ...rest] = l.split(/\s+/);
      return { op: op!.toUpperCase(), args: rest.join(' ') };
    });
}

/** Splits instructions into stages at each FROM, by stage name (`FROM image AS name`). */
function stages(all: Instruction[]): Map<string, Instruction[]> {
  const out = new Map<string, Instruction[]>();
  let current: Instruction[] = [];
  for (const i of all) {
    if (i.op === 'FROM') {
      current = [];
      out.set(/ AS (\S+)$/i.exec(i.args)?.[1] ?? String(out.size), current);
    }
    current.push(i);
  }
  return out;
}

const dockerfile = instructions(read('Dockerfile'));
const byName = stages(dockerfile);
const build = byName.get('build');
const runtime = byName.get('runtime');
/** The image's config as the container reads it with nothing in its environment. */
const IMAGE_CONFIG = 'config/docker.yaml';
const defaults = parseConfig(parse(read(IMAGE_CONFIG)), {});
const tsBuild = JSON.parse(read('tsconfig.build.json')) as { compilerOptions: { rootDir: string; outDir: string } };

/** `["a", "b"]` exec form as an array. */
function execForm(args: string): string[] {
  return JSON.parse(args) as string[];
}

describe('Dockerfile', () => {
  it('has a build stage, the development broker stage, and the runtime stage last (the default target)', () => {
    expect([...byName.keys()]).toEqual(['build', 'dev-broker', 'runtime']);
  });

  it('the development broker stage runs the relay script through tsx, which the build stage installed', () => {
    const dev = byName.get('dev-broker')!;
    expect(dev[0]!.args).toBe('build AS dev-broker');
    const cmd = execForm(dev.find((i) => i.op === 'CMD')!.args);
    expect(cmd.slice(0, 3)).toEqual(['node', '--import', 'tsx']);
    expect(existsSync(join(ROOT, cmd[3]!)), cmd[3]).toBe(true);
    const pkg = JSON.parse(read('package.json')) as { devDependencies: Record<string, string> };
    expect(pkg.devDependencies.tsx).toBeDefined();
    expect(dev.filter((i) => i.op === 'EXPOSE').map((i) => i.args)).toEqual(['6632']);
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

  it('exposes the ports of the image config', () => {
    const exposed = runtime!
      .filter((i) => i.op === 'EXPOSE')
      .flatMap((i) => i.args.split(/\s+/))
      .map(Number)
      .sort();
    expect(exposed).toEqual([defaults.server.https.port, defaults.server.admin.port].sort());
  });

  it('runs as a non-root user', () => {
    const user = runtime!.filter((i) => i.op === 'USER').at(-1)?.args;
    expect(user).toBeDefined();
    expect(['root', '0']).not.toContain(user!.split(':')[0]);
  });

  it('health-checks the admin /livez on the admin port of the image config, through loopback', () => {
    const check = runtime!.find((i) => i.op === 'HEALTHCHECK')!.args;
    expect(check).toContain(`http://127.0.0.1:${defaults.server.admin.port}/livez`);
    expect(['0.0.0.0', '127.0.0.1']).toContain(defaults.server.admin.host);
  });

  it('the image config listens where a container is reached and takes the broker, Redis and secrets from the environment', () => {
    expect(defaults.server.admin.host).toBe('0.0.0.0');
    expect(defaults.server.https.host).toBe('0.0.0.0');
    expect(defaults.server.workers).toBe(1);
    expect(defaults.tenants.default!.brokers).toEqual(['http://broker:6632']);
    const env = {
      QUEEN_EDGE_BROKER_URL: 'http://queen.internal:6632',
      QUEEN_EDGE_REDIS_URL: 'redis://r:6379/0',
      JWT_SECRET: 's',
      QUEEN_EDGE_ADMIN_TOKEN: 't',
      QUEEN_EDGE_TLS_CERT: '/etc/queen-edge/tls/tls.crt',
      QUEEN_EDGE_TLS_KEY: '/etc/queen-edge/tls/tls.key',
      QUEEN_EDGE_WORKERS: '2',
    };
    const set = parseConfig(parse(read(IMAGE_CONFIG)), env);
    expect(set.tenants.default!.brokers).toEqual(['http://queen.internal:6632']);
    expect(set.redis.url).toBe('redis://r:6379/0');
    expect(set.auth.secret).toBe('s');
    expect(set.server.admin.token).toBe('t');
    expect(set.server.https).toMatchObject({ cert: env.QUEEN_EDGE_TLS_CERT, key: env.QUEEN_EDGE_TLS_KEY });
    expect(set.server.workers).toBe(2);
  });

  it('reads its config from /etc/queen-edge/config.yaml and has /etc/queen-edge/tls for certificates', () => {
    const env = runtime!
      .filter((i) => i.op === 'ENV')
      .map((i) => i.args)
      .join(' ');
    expect(env).toContain('QUEEN_EDGE_CONFIG=/etc/queen-edge/config.yaml');
    expect(runtime!.some((i) => i.op === 'COPY' && i.args === `${IMAGE_CONFIG} /etc/queen-edge/config.yaml`)).toBe(true);
    expect(runtime!.some((i) => i.op === 'RUN' && i.args.includes('mkdir -p /etc/queen-edge/tls'))).toBe(true);
  });
});
