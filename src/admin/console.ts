/**
 * The operator console's static files (docs/console.md), served by the admin listener at
 * `/console`. The files hold no data and no secret: everything shown comes from the admin API,
 * called by the page with the token the operator types in. They are served under a strict CSP
 * (same-origin scripts, styles and fetches only; no inline code; no framing).
 *
 * The page's own files live in the package's top-level `console/` folder, which sits at the same
 * place relative to this module in the source tree (src/admin) and in the build (dist/admin).
 * uPlot is read from its installed package (docs/decisions/0008-console-assets.md).
 */
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import type { IncomingMessage, ServerResponse } from 'node:http';

const CONSOLE_DIR = fileURLToPath(new URL('../../console/', import.meta.url));
const require = createRequire(import.meta.url);

/** URL path → file on disk; nothing else under /console is served. */
const FILES: ReadonlyMap<string, () => string> = new Map([
  ['/console', () => `${CONSOLE_DIR}index.html`],
  ['/console/app.js', () => `${CONSOLE_DIR}app.js`],
  ['/console/console.css', () => `${CONSOLE_DIR}console.css`],
  ['/console/vendor/uPlot.esm.js', () => require.resolve('uplot/dist/uPlot.esm.js')],
  ['/console/vendor/uPlot.min.css', () => require.resolve('uplot/dist/uPlot.min.css')],
]);

const TYPES: Readonly<Record<string, string>> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
};

export const CONSOLE_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
  'cache-control': 'no-cache',
};

const cache = new Map<string, Buffer>();

/** Answers a console path (GET or HEAD); false when the path is not one of the console's files. */
export async function serveConsole(path: string, req: IncomingMessage, res: ServerResponse): Promise<boolean> {
  const locate = FILES.get(path === '/console/' ? '/console' : path);
  if (!locate || (req.method !== 'GET' && req.method !== 'HEAD')) return false;
  const file = locate();
  let body = cache.get(file);
  if (!body) cache.set(file, (body = await readFile(file)));
  const ext = file.slice(file.lastIndexOf('.') + 1);
  res.writeHead(200, { ...CONSOLE_HEADERS, 'content-type': TYPES[ext] ?? 'application/octet-stream', 'content-length': String(body.length) });
  if (req.method === 'HEAD') res.end();
  else res.end(body);
  return true;
}
