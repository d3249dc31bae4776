/**
 * The console's static files on the admin listener: served from the package (uPlot from
 * node_modules) with the console's security headers, nothing else under /console, and without an
 * admin token only a page saying how to turn the console on.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { ADMIN_TOKEN, admin } from './admin-call.js';

let edge: EdgeHarness;
let off: EdgeHarness;

beforeAll(async () => {
  edge = await startEdge(testConfig(['http://127.0.0.1:1'], { server: { admin: { token: ADMIN_TOKEN } } }));
  off = await startEdge(testConfig(['http://127.0.0.1:1'], { server: { admin: { token: null } } }));
});

afterAll(async () => {
  await Promise.all([edge?.close(), off?.close()]);
});

describe('/console static files', () => {
  it('serves the page, its script, its styles and uPlot with a strict CSP, without a token', async () => {
    for (const [path, type, marker] of [
      ['/console', 'text/html', '<script type="module" src="/console/app.js">'],
      ['/console/', 'text/html', '<title>queen-edge console</title>'],
      ['/console/app.js', 'text/javascript', "import uPlot from './vendor/uPlot.esm.js'"],
      ['/console/console.css', 'text/css', '--accent'],
      ['/console/vendor/uPlot.esm.js', 'text/javascript', 'export { uPlot as default }'],
      ['/console/vendor/uPlot.min.css', 'text/css', '.uplot'],
    ] as const) {
      const r = await admin(edge, 'GET', path, { token: null });
      expect(r.status, path).toBe(200);
      expect(String(r.headers['content-type'])).toContain(type);
      expect(r.text).toContain(marker);
      expect(r.headers['content-security-policy']).toBe(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
      );
      expect(r.headers['x-frame-options']).toBe('DENY');
      expect(r.headers['x-content-type-options']).toBe('nosniff');
    }
  });

  it('serves nothing else under /console, and no console without an admin token', async () => {
    for (const path of [
      '/console/index.html',
      '/console/../package.json',
      '/console/%2e%2e/package.json',
      '/console/vendor/uPlot.cjs.js',
      '/console/app.js/',
    ]) {
      expect((await admin(edge, 'GET', path, { token: null })).status, path).toBe(404);
    }
    expect((await admin(edge, 'POST', '/console', { token: null })).status).toBe(404);
    expect((await admin(off, 'GET', '/console', { token: null })).status).toBe(404);
  });

  it('without an admin token, /console explains how to turn it on: a page for browsers, JSON otherwise', async () => {
    const page = await request(`${off.adminUrl}/console`, { headers: { accept: 'text/html,application/xhtml+xml' } });
    expect(page.statusCode).toBe(404);
    expect(page.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(page.headers['content-security-policy']).toContain("default-src 'none'");
    const html = await page.body.text();
    expect(html).toContain('QUEEN_EDGE_ADMIN_TOKEN=&lt;token&gt; npm start');
    expect(html).not.toContain('<script');
    const json = await admin(off, 'GET', '/console/app.js', { token: null });
    expect(json.status).toBe(404);
    expect(json.json).toMatchObject({ code: 'admin_disabled', error: expect.stringContaining('Set one (config/default.yaml reads $QUEEN_EDGE_ADMIN_TOKEN') });
  });
});
