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
  if (!body) {
    body = await readFile(file);
    cache.set(file, body);
  }
  const ext = file.slice(file.lastIndexOf('.') + 1);
  res.writeHead(200, { ...CONSOLE_HEADERS, 'content-type': TYPES[ext] ?? 'application/octet-stream', 'content-length': String(body.length) });
  if (req.method === 'HEAD') res.end();
  else res.end(body);
  return true;
}

const HOW_TO_ENABLE =
  'The console and the admin API are off: no server.admin.token is configured. Set one (config/default.yaml reads $QUEEN_EDGE_ADMIN_TOKEN, ' +
  'e.g. QUEEN_EDGE_ADMIN_TOKEN=$(openssl rand -hex 24) npm start), restart queen-edge, open /console again and sign in with that token (docs/console.md).';

const OFF_PAGE = Buffer.from(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>queen-edge console is off</title></head>
<body><h1>The queen-edge console is off</h1>
<p>No <code>server.admin.token</code> is configured, so the console and the admin API are switched off.</p>
<ol><li>Choose a token, e.g. <code>openssl rand -hex 24</code>.</li>
<li>Start queen-edge with it: <code>QUEEN_EDGE_ADMIN_TOKEN=&lt;token&gt; npm start</code> (config/default.yaml reads that variable), or set <code>server.admin.token</code> in your configuration.</li>
<li>Open this page again and sign in with the token.</li></ol>
<p>See docs/console.md.</p></body></html>
`);

/**
 * Answers a console path while no admin token is configured: how to turn the console on, as a
 * page for browsers and as the admin API's `admin_disabled` JSON otherwise (404 either way: there
 * is no console here). False for paths outside the console.
 */
export function serveConsoleOff(path: string, req: IncomingMessage, res: ServerResponse): boolean {
  if (!(path === '/console' || path.startsWith('/console/'))) return false;
  const html = (req.headers.accept ?? '').includes('text/html');
  const body = html ? OFF_PAGE : Buffer.from(JSON.stringify({ error: HOW_TO_ENABLE, code: 'admin_disabled' }));
  res.writeHead(404, {
    ...CONSOLE_HEADERS,
    'cache-control': 'no-store',
    'content-type': html ? TYPES.html! : 'application/json',
    'content-length': String(body.length),
  });
  res.end(req.method === 'HEAD' ? undefined : body);
  return true;
}
