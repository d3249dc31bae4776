/**
 * The operator console (/console on the admin listener) in Debian's Chromium against a real edge
 * with Redis and broker doubles: a wrong token refused, sign-in, the tenants table, suspend (a
 * client then gets 403 cluster_suspended) and resume, a tenant's hourly charts drawn from data,
 * the brokers and plans pages. Screenshots of every page land in test/artifacts/ (README links them).
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HOUR_MS, UsageCounts, dayId, hourFields } from '../../src/metering/counts.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { TEST_PLAN, call, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { manyTenantId, manyTenants } from '../helpers/many-tenants.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor, waitForValue } from '../helpers/wait.js';

/** The browser globals these tests read inside the page (tsconfig has no DOM lib). */
interface PageGlobals {
  document: {
    querySelector(selector: string): { textContent: string | null; innerText: string } | null;
    addEventListener(type: 'securitypolicyviolation', listener: (e: { violatedDirective: string; blockedURI: string }) => void): void;
  };
  sessionStorage: { length: number };
  cspViolations: string[];
  qeCharts: Record<
    string,
    {
      data: number[][];
      ctx: { canvas: { width: number; height: number }; getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } };
    }
  >;
}

const ARTIFACTS_DIR = join(import.meta.dirname, '../artifacts');
const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
];
/** Generous: the machine running CI is small and busy. */
const UI_TIMEOUT = 15000;

const prefix = uniquePrefix();
let b1: BrokerDouble;
let b2: BrokerDouble;
let edge: EdgeHarness;
let browser: Browser;
let page: Page;
let acmeJwt: string;
const pageErrors: string[] = [];

/** 48 hours of synthetic history for acme, in the usage store's layout, ending before this hour. */
async function writeHistory(): Promise<void> {
  const r = await connectTest(SHARED_REDIS_URL, 5000);
  const now = Date.now() - (Date.now() % HOUR_MS);
  const days = new Map<string, Array<string | number>>();
  for (let k = 1; k <= 48; k++) {
    const hour = now - k * HOUR_MS;
    const c = new UsageCounts();
    c.requests = 200 + 150 * Math.sin(k / 4) + k;
    c.requests = Math.round(c.requests);
    c.messagesPushed = Math.round(c.requests * 3);
    c.messagesDelivered = Math.round(c.requests * 2.5);
    c.acks = Math.round(c.requests * 2.4);
    c.ingressBytes = c.messagesPushed * 310;
    c.egressBytes = c.messagesDelivered * 420;
    if (k % 6 === 0) c.refusals = { rate_limited: 12 + (k % 5), quota_exceeded: k % 12 === 0 ? 4 : 0 };
    const key = `${prefix}{usage}:d:acme:${dayId(hour)}`;
    const fields = days.get(key) ?? [];
    for (const [f, n] of hourFields(new Date(hour).getUTCHours(), c)) fields.push(f, n);
    days.set(key, fields);
  }
  for (const [key, fields] of days) await r.hset(key, ...fields);
  r.disconnect();
}

beforeAll(async () => {
  b1 = await startBrokerDouble({ name: 'b1' });
  b2 = await startBrokerDouble({ name: 'b2' });
  edge = await startEdge(
    testConfig([b1.url, b2.url], {
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 500 },
      server: { admin: { token: ADMIN_TOKEN } },
      plans: {
        test: { ...TEST_PLAN, quotas: { messagesPerMonth: 5_000_000, ingressBytesPerMonth: 2 * 1024 ** 3 } },
        starter: {
          ...TEST_PLAN,
          features: ['streams', 'traces'],
          limits: { ...TEST_PLAN.limits, requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000 },
          quotas: { messagesPerMonth: 1_000_000, ingressBytesPerMonth: 1024 ** 3 },
        },
      },
      // b2 serves both tenants: declared tenancy-aware, as a shared broker must be.
      tenants: {
        acme: { tenancyAwareBrokers: true },
        globex: { plan: 'starter', hosts: ['globex.localhost', 'api.globex.example'], brokers: [b2.url], tenancyAwareBrokers: true, cors: { origins: [] } },
      },
    }),
  );
  await writeHistory();
  acmeJwt = await token({ roles: ['read-write'], tenant: 'acme' });
  for (let i = 0; i < 5; i++)
    expect((await call(edge, 'POST', '/api/v1/push', { token: acmeJwt, body: { items: [{ queue: 'orders', payload: { i } }] } })).status).toBe(201);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  // Whatever the CSP blocks is recorded: the console must need nothing it forbids.
  await page.addInitScript(() => {
    const w = globalThis as unknown as PageGlobals;
    w.cspViolations = [];
    w.document.addEventListener('securitypolicyviolation', (e) => {
      w.cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
    });
  });
  page.on('pageerror', (err) => pageErrors.push(err.message));
  await mkdir(ARTIFACTS_DIR, { recursive: true });
}, 60000);

afterAll(async () => {
  await browser?.close();
  await edge?.close();
  await Promise.all([b1?.close(), b2?.close()]);
  const r = await connectTest(SHARED_REDIS_URL);
  await flushPrefix(r, prefix);
  r.disconnect();
});

const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS_DIR, `console-${name}.png`), fullPage: true });

async function signIn(tok: string): Promise<void> {
  await page.fill('#token', tok);
  await page.click('#login-form button[type="submit"]');
}

/** Confirms the open dialog with its confirm button. */
async function confirm(): Promise<void> {
  await page.waitForSelector('#confirm[open]', { timeout: UI_TIMEOUT });
  await page.click('#confirm-ok');
}

async function acmeStatus(): Promise<number> {
  return (await call(edge, 'GET', '/api/v1/pop/queue/orders?wait=false', { token: acmeJwt })).status;
}

// Each step needs a few seconds; a loaded CI machine gets ten times that.
describe('the operator console', { timeout: 60_000 }, () => {
  it('is served with a strict CSP, and a wrong token is refused', async () => {
    const res = await page.goto(`${edge.adminUrl}/console`);
    expect(res!.status()).toBe(200);
    const csp = res!.headers()['content-security-policy']!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    await page.waitForSelector('#login:not([hidden])', { timeout: UI_TIMEOUT });
    await signIn('not-the-admin-token');
    await page.waitForFunction(() => (globalThis as unknown as PageGlobals).document.querySelector('#login-error')?.textContent?.includes('401'), undefined, {
      timeout: UI_TIMEOUT,
    });
    expect(await page.isVisible('#nav')).toBe(false);
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).sessionStorage.length)).toBe(0);
    await shot('login');
  });

  it('signs in; the overview shows live stats; the token stays out of the URL', async () => {
    await signIn(ADMIN_TOKEN);
    await page.waitForSelector('#refusals', { timeout: UI_TIMEOUT });
    expect(page.url()).not.toContain(ADMIN_TOKEN);
    expect(await page.evaluate(() => Object.keys((globalThis as unknown as PageGlobals).sessionStorage))).toEqual(['queen-edge-admin-token']);
    // Traffic after the first read: a later refresh shows its rate and its refusals.
    const bad = await token({ roles: ['read-write'], tenant: 'acme' }, 'another-secret-0123456789abcdef-xyz');
    for (let i = 0; i < 40; i++) await call(edge, 'POST', '/api/v1/push', { token: acmeJwt, body: { items: [{ queue: 'orders', payload: { i } }] } });
    for (let i = 0; i < 8; i++) expect((await call(edge, 'GET', '/api/v1/pop/queue/orders', { token: bad })).status).toBe(401);
    await page.waitForSelector('#refusals code:text-is("unauthorized")', { timeout: UI_TIMEOUT });
    await page.waitForFunction(
      () => /Request rate\s*[1-9]/.test((globalThis as unknown as PageGlobals).document.querySelector('.cards')!.innerText),
      undefined,
      { timeout: UI_TIMEOUT },
    );
    const text = await page.innerText('main');
    expect(text).toMatch(/Workers alive\s*1\s*process/);
    expect(text).toContain('fail mode local');
    await shot('overview');
  });

  it('lists the tenants; suspending one refuses its clients with 403 cluster_suspended until resumed', async () => {
    await page.click('#nav a[data-page="tenants"]');
    await page.waitForSelector('#tenants tr[data-tenant="acme"][data-status="active"]', { timeout: UI_TIMEOUT });
    expect(await page.$$eval('#tenants tbody tr', (trs) => trs.map((tr) => tr.getAttribute('data-tenant')))).toEqual(['acme', 'globex']);
    // This month's pushes (the history's hours of this month and the 5 pushes above), as the API reports them.
    const pushed = (await admin(edge, 'GET', '/admin/v1/tenants/acme/usage?granularity=month')).json.total.messagesPushed as number;
    expect(pushed).toBeGreaterThanOrEqual(5);
    expect(await page.innerText('#tenants tr[data-tenant="acme"]')).toContain(`${pushed.toLocaleString('en-US')} msg of 5,000,000 msg`);
    await page.waitForFunction(
      () => !(globalThis as unknown as PageGlobals).document.querySelector('#tenants')!.textContent!.includes('measuring'),
      undefined,
      { timeout: UI_TIMEOUT },
    );
    await shot('tenants');

    await page.click('#tenants tr[data-tenant="acme"] button');
    await confirm();
    await page.waitForSelector('#tenants tr[data-tenant="acme"][data-status="suspended"]', { timeout: UI_TIMEOUT });
    await waitFor(async () => (await acmeStatus()) === 403, UI_TIMEOUT, 'acme refused');
    const refused = await call(edge, 'GET', '/api/v1/pop/queue/orders?wait=false', { token: acmeJwt });
    expect(refused.json).toMatchObject({ code: 'cluster_suspended' });

    await page.click('#tenants tr[data-tenant="acme"] button');
    await confirm();
    await page.waitForSelector('#tenants tr[data-tenant="acme"][data-status="active"]', { timeout: UI_TIMEOUT });
    await waitFor(async () => (await acmeStatus()) !== 403, UI_TIMEOUT, 'acme served again');

    // The resume overrides the config file's status: the row says so, and Reset to file drops it.
    const reset = '#tenants tr[data-tenant="acme"] button:has-text("Reset to file")';
    await page.waitForSelector(reset, { timeout: UI_TIMEOUT });
    expect(await page.innerText('#tenants tr[data-tenant="acme"] td.status')).toContain('override');
    await page.click(reset);
    await confirm();
    await page.waitForSelector(reset, { state: 'detached', timeout: UI_TIMEOUT });
    expect((await admin(edge, 'GET', '/admin/v1/tenants/acme')).json.source).toMatchObject({ status: 'file', overridden: false });
  });

  it("draws a tenant's hourly charts from its usage (24 h and 7 d)", async () => {
    await page.click('#tenants a[href="#/tenants/acme"]');
    await page.waitForSelector('[data-chart="refusals"] canvas', { timeout: UI_TIMEOUT });
    for (const range of ['24 h', '7 d']) {
      if (range !== '24 h') {
        await page.click(`button:has-text("${range}")`);
        await page.waitForSelector(`button[aria-pressed="true"]:has-text("${range}")`, { timeout: UI_TIMEOUT });
        await page.waitForSelector('[data-chart="refusals"] canvas', { timeout: UI_TIMEOUT });
      }
      // uPlot paints on an animation frame after its data arrives: poll until every chart's line is
      // on the canvas (or the wait runs out and the assertions below say which chart is blank).
      const measure = () =>
        page.evaluate(() => {
          const charts = (globalThis as unknown as PageGlobals).qeCharts;
          return Object.fromEntries(
            Object.entries(charts).map(([name, u]) => {
              const sum = u.data.slice(1).reduce((n, s) => n + s.reduce((a, v) => a + (v ?? 0), 0), 0);
              // Pixels of the plot in a series stroke colour (the first two: blue #2452c5, green
              // #1d7a3d): the lines were drawn. Either may lie on top of the other where they meet.
              const { width, height } = u.ctx.canvas;
              const px = u.ctx.getImageData(0, 0, width, height).data;
              const near = (i: number, r: number, g: number, b: number) =>
                Math.abs(px[i]! - r) < 24 && Math.abs(px[i + 1]! - g) < 24 && Math.abs(px[i + 2]! - b) < 24;
              let stroke = 0;
              for (let i = 0; i < px.length; i += 4) if (near(i, 0x24, 0x52, 0xc5) || near(i, 0x1d, 0x7a, 0x3d)) stroke++;
              return [name, { points: u.data[0]!.length, sum, stroke }];
            }),
          );
        });
      const names = ['requests', 'messages', 'bytes', 'refusals'];
      const drawn = await waitForValue(
        async () => {
          const d = await measure();
          return names.every((n) => (d[n]?.stroke ?? 0) > 50) ? d : undefined;
        },
        UI_TIMEOUT,
        `the ${range} charts drawn`,
      );
      const hours = range === '24 h' ? 24 : 168;
      for (const name of names) {
        expect(drawn[name], name).toMatchObject({ points: hours });
        expect(drawn[name]!.sum, name).toBeGreaterThan(0);
        expect(drawn[name]!.stroke, name).toBeGreaterThan(50);
      }
      if (range === '24 h') await shot('tenant');
    }
  });

  it("creates a tenant's API key shown once with a copy button, lists it without the secret, revokes it after a confirmation", async () => {
    await page.waitForSelector('#keys #key-name', { timeout: UI_TIMEOUT });
    await page.fill('#key-name', 'console producer');
    await page.click('#keys button[type="submit"]');
    await page.waitForSelector('#new-key', { timeout: UI_TIMEOUT });
    const key = await page.inputValue('#new-key');
    const id = key.slice(3, 15);
    expect((await call(edge, 'POST', '/api/v1/push', { token: key, body: { items: [{ queue: 'orders', payload: {} }] } })).status).toBe(201);
    await page.click('#copy-key');
    await page.waitForFunction(() => (globalThis as unknown as PageGlobals).document.querySelector('#copy-status')!.textContent !== '', undefined, {
      timeout: UI_TIMEOUT,
    });
    await page.waitForSelector(`#keys tr[data-key="${id}"]`, { timeout: UI_TIMEOUT });
    await shot('keys');
    // Shown once: the page drawn again lists the key, never its secret.
    await page.click('#nav a[data-page="tenants"]');
    await page.click('#tenants a[href="#/tenants/acme"]');
    await page.waitForSelector(`#keys tr[data-key="${id}"]`, { timeout: UI_TIMEOUT });
    expect(await page.$('#new-key')).toBeNull();
    expect(await page.content()).not.toContain(key);
    await page.click(`#keys tr[data-key="${id}"] button`);
    await confirm();
    await page.waitForSelector(`#keys tr[data-key="${id}"]`, { state: 'detached', timeout: UI_TIMEOUT });
    expect((await call(edge, 'POST', '/api/v1/push', { token: key, body: { items: [{ queue: 'orders', payload: {} }] } })).status).toBe(401);
  });

  it('shows each ring with its brokers, and the plans', async () => {
    await page.click('#nav a[data-page="brokers"]');
    await page.waitForSelector('[data-ring="acme"] tbody tr', { timeout: UI_TIMEOUT });
    expect(await page.$$eval('[data-ring="acme"] tbody tr', (trs) => trs.length)).toBe(2);
    const shares = await page.$$eval('[data-ring="acme"] tbody tr td:nth-child(2)', (tds) => tds.map((td) => Number.parseFloat(td.textContent!)));
    expect(shares.reduce((a, b) => a + b, 0)).toBeCloseTo(100, 0);
    expect(await page.innerText('[data-ring="globex"]')).toContain(b2.url);
    await shot('brokers');

    await page.click('#nav a[data-page="plans"]');
    await page.waitForSelector('#plans tr[data-plan="starter"]', { timeout: UI_TIMEOUT });
    expect(await page.innerText('#plans tr[data-plan="starter"]')).toContain('50 req/s');
    await shot('plans');

    // Redis is configured, so plans are editable: the JSON goes through the API's validation.
    await page.click('#plans tr[data-plan="starter"] button');
    await page.waitForSelector('dialog[open] textarea', { timeout: UI_TIMEOUT });
    const json = await page.inputValue('dialog[open] textarea');
    expect(json).toContain('"requestsPerSec": 50,');
    await page.fill('dialog[open] textarea', json.replace('"requestsPerSec": 50,', '"requestsPerSec": 60,'));
    await page.click('dialog[open] button[value="ok"]');
    await page.waitForFunction(
      () => (globalThis as unknown as PageGlobals).document.querySelector('#plans tr[data-plan="starter"]')?.innerText.includes('60 req/s'),
      undefined,
      { timeout: UI_TIMEOUT },
    );
    expect((await admin(edge, 'GET', '/admin/v1/plans/starter')).json.limits.requestsPerSec).toBe(60);
  });

  it('a sign-in link (/console#token=..., as npm run demo prints) signs in and drops the token from the address', async () => {
    const linked = await browser.newPage();
    try {
      await linked.goto(`${edge.adminUrl}/console#token=${ADMIN_TOKEN}`);
      await linked.waitForSelector('#refusals', { timeout: UI_TIMEOUT });
      expect(linked.url()).toMatch(/\/console#\/overview$/);
      await linked.click('#nav a[data-page="tenants"]');
      await linked.waitForSelector('#tenants tr[data-tenant="acme"]', { timeout: UI_TIMEOUT });
    } finally {
      await linked.close();
    }
  });

  it('signing out forgets the token; nothing was blocked by the CSP and no script failed', async () => {
    await page.click('#logout');
    await page.waitForSelector('#login:not([hidden])', { timeout: UI_TIMEOUT });
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).sessionStorage.length)).toBe(0);
    expect(await page.evaluate(() => (globalThis as unknown as PageGlobals).cspViolations)).toEqual([]);
    expect(pageErrors).toEqual([]);
  });
});

// Many tenants: the tenants table and the brokers page show a page at a time and search on the
// server (the admin API's cursor and filters), so the page stays small whatever the directory
// holds. 10,000 file tenants keep the edge's start inside the hook's minute on a loaded 2-core
// machine; the tests themselves take a few seconds.
describe('the operator console with 10,000 tenants', { timeout: 60_000 }, () => {
  const N = 10_000;
  let big: EdgeHarness;
  let b3: BrokerDouble;
  let tab: Page;

  beforeAll(async () => {
    b3 = await startBrokerDouble({ name: 'b3' });
    big = await startEdge(
      testConfig([b3.url], {
        server: { admin: { token: ADMIN_TOKEN } },
        plans: { pro: TEST_PLAN },
        tenants: manyTenants(N, [b3.url], { proPlan: 'pro' }),
      }),
    );
    tab = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    tab.on('pageerror', (err) => pageErrors.push(err.message));
    await tab.goto(`${big.adminUrl}/console#token=${ADMIN_TOKEN}`);
    await tab.waitForSelector('#refusals', { timeout: UI_TIMEOUT });
  }, 60_000);

  afterAll(async () => {
    await tab?.close();
    await big?.close();
    await b3?.close();
  });

  const rows = () => tab.$$eval('#tenants tbody tr', (trs) => trs.map((tr) => tr.getAttribute('data-tenant')));
  const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => manyTenantId(from + i));

  it('pages through the tenants (Next, Previous) and searches by id or host prefix, status and plan', async () => {
    await tab.click('#nav a[data-page="tenants"]');
    await tab.waitForSelector(`#tenants tr[data-tenant="${manyTenantId(0)}"]`, { timeout: UI_TIMEOUT });
    expect(await tab.innerText('h1 + p.sub')).toContain(`${(N + 1).toLocaleString('en-US')} tenants`);
    // acme sorts first; then the generated ids in order.
    expect(await rows()).toEqual(['acme', ...range(0, 49)]);
    await tab.click('#tenants-next');
    await tab.waitForSelector(`#tenants tr[data-tenant="${manyTenantId(49)}"]`, { timeout: UI_TIMEOUT });
    expect(await rows()).toEqual(range(49, 99));
    await tab.click('#tenants-prev');
    await tab.waitForSelector('#tenants tr[data-tenant="acme"]', { timeout: UI_TIMEOUT });

    await tab.fill('#tenants-prefix', manyTenantId(1234).slice(0, -1));
    await tab.click('#tenants-search button[type="submit"]');
    await tab.waitForSelector(`#tenants tr[data-tenant="${manyTenantId(1239)}"]`, { timeout: UI_TIMEOUT });
    expect(await rows()).toEqual(range(1230, 1240));
    expect(await tab.isDisabled('#tenants-next')).toBe(true);

    // A host's prefix finds its tenant, in any case.
    await tab.fill('#tenants-prefix', `${manyTenantId(4321)}.LOCAL`);
    await tab.click('#tenants-search button[type="submit"]');
    await tab.waitForSelector(`#tenants tr[data-tenant="${manyTenantId(4321)}"]`, { timeout: UI_TIMEOUT });
    expect(await rows()).toEqual([manyTenantId(4321)]);

    // With status and plan: every tenth is suspended and every third on pro.
    await tab.fill('#tenants-prefix', `${manyTenantId(9000).slice(0, -2)}`);
    await tab.selectOption('#tenants-status', 'suspended');
    await tab.selectOption('#tenants-plan', 'pro');
    await tab.click('#tenants-search button[type="submit"]');
    const expected = Array.from({ length: 100 }, (_, i) => 9000 + i).filter((i) => i % 10 === 9 && i % 3 === 0);
    await tab.waitForSelector(`#tenants tr[data-tenant="${manyTenantId(expected[0]!)}"]`, { timeout: UI_TIMEOUT });
    expect(await rows()).toEqual(expected.map(manyTenantId));
    await tab.screenshot({ path: join(ARTIFACTS_DIR, 'console-tenants-search.png'), fullPage: true });

    await tab.fill('#tenants-prefix', 'nobody');
    await tab.click('#tenants-search button[type="submit"]');
    await tab.waitForSelector('#tenants td.empty', { timeout: UI_TIMEOUT });
    expect(await tab.innerText('#tenants td.empty')).toBe('No tenant matches.');
    expect(pageErrors).toEqual([]);
  });

  it('pages through the brokers page (Next, Previous) and searches it by id or host prefix', async () => {
    const rings = () => tab.$$eval('[data-ring]', (els) => els.map((el) => el.getAttribute('data-ring')));
    await tab.click('#nav a[data-page="brokers"]');
    await tab.waitForSelector(`[data-ring="${manyTenantId(0)}"]`, { timeout: UI_TIMEOUT });
    expect(await rings()).toEqual(['acme', ...range(0, 19)]);
    await tab.click('#brokers-next');
    await tab.waitForSelector(`[data-ring="${manyTenantId(19)}"]`, { timeout: UI_TIMEOUT });
    expect(await rings()).toEqual(range(19, 39));
    expect(await tab.innerText(`[data-ring="${manyTenantId(19)}"]`)).toContain(b3.url);
    await tab.click('#brokers-prev');
    await tab.waitForSelector('[data-ring="acme"]', { timeout: UI_TIMEOUT });

    await tab.fill('#brokers-prefix', `${manyTenantId(4321)}.LOCAL`);
    await tab.click('#brokers-search button[type="submit"]');
    await tab.waitForSelector(`[data-ring="${manyTenantId(4321)}"]`, { timeout: UI_TIMEOUT });
    expect(await rings()).toEqual([manyTenantId(4321)]);
    expect(await tab.isDisabled('#brokers-next')).toBe(true);
    expect(pageErrors).toEqual([]);
  });
});
