// `npm start`'s prestart: compiles src/ to dist/ only when a source or a tsconfig changed since the
// last successful build (dist/.build-stamp), so a second `npm start` starts in about a second
// instead of recompiling. Plain JavaScript, run by node itself: no tsx start-up cost.
import { spawnSync } from 'node:child_process';
import { readdirSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const STAMP = 'dist/.build-stamp';
const CONFIGS = ['tsconfig.json', 'tsconfig.build.json', 'package-lock.json'];

/** Newest modification time (ms) of the files under `dir`, recursively; 0 when it has none. */
function newestUnder(dir) {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestUnder(path) : statSync(path).mtimeMs);
  }
  return newest;
}

function mtime(path) {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return null;
  }
}

/** Why `root` needs a build (a sentence), or null when dist/ is up to date. */
export function staleBuild(root) {
  const built = mtime(join(root, STAMP));
  if (built === null) return 'no build yet';
  if (newestUnder(join(root, 'src')) > built) return 'sources changed since the last build';
  for (const file of CONFIGS) if ((mtime(join(root, file)) ?? 0) > built) return `${file} changed since the last build`;
  return null;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = resolve(fileURLToPath(import.meta.url), '../..');
  const why = staleBuild(root);
  if (why === null) process.exit(0);
  process.stderr.write(`queen-edge: building dist/ (${why})\n`);
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json')], { stdio: 'inherit' });
  if (tsc.status !== 0) process.exit(tsc.status ?? 1);
  mkdirSync(join(root, 'dist'), { recursive: true });
  writeFileSync(join(root, STAMP), `${new Date().toISOString()}\n`);
}
