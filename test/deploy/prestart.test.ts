/** `npm start` compiles only when a source or a tsconfig changed since the last build (scripts/build-if-stale.mjs). */
import { mkdir, mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain JavaScript script, run by node without a build.
import { staleBuild } from '../../scripts/build-if-stale.mjs';

const ROOT = resolve(import.meta.dirname, '../..');
const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

/** A project tree whose files were all last modified at `at` (seconds). */
async function project(at: number): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'qe-prestart-'));
  dirs.push(root);
  await mkdir(join(root, 'src/admin'), { recursive: true });
  for (const f of ['src/cli.ts', 'src/admin/api.ts', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json']) {
    await writeFile(join(root, f), '');
    await utimes(join(root, f), at, at);
  }
  return root;
}

async function stamp(root: string, at: number): Promise<void> {
  await mkdir(join(root, 'dist'), { recursive: true });
  await writeFile(join(root, 'dist/.build-stamp'), '');
  await utimes(join(root, 'dist/.build-stamp'), at, at);
}

describe('prestart', () => {
  it('is the staleness check, so `npm ci && npm start` still builds on a fresh clone', async () => {
    const { scripts } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    expect(scripts.prestart).toBe('node scripts/build-if-stale.mjs');
    const root = await project(1_000_000);
    expect(staleBuild(root)).toBe('no build yet');
  });

  it('builds again only after a source (at any depth) or a tsconfig changed', async () => {
    const root = await project(1_000_000);
    await stamp(root, 1_000_100);
    expect(staleBuild(root)).toBeNull();
    await utimes(join(root, 'src/admin/api.ts'), 1_000_200, 1_000_200);
    expect(staleBuild(root)).toBe('sources changed since the last build');
    await stamp(root, 1_000_300);
    expect(staleBuild(root)).toBeNull();
    await utimes(join(root, 'tsconfig.build.json'), 1_000_400, 1_000_400);
    expect(staleBuild(root)).toBe('tsconfig.build.json changed since the last build');
  });
});
