/**
 * The example page (examples/browser) in Debian's Chromium against queen-edge over HTTPS and a
 * broker double: CORS as a browser enforces it, exposed headers, a wildcard origin, and
 * ten parked long polls multiplexed on one HTTP/2 connection while a push and its pop complete.
 *
 * Names under .test resolve to 127.0.0.1 inside Chromium (--host-resolver-rules), so one loopback
 * static server is several origins and one edge is several tenant hosts.
 */
import { mkdir, readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { forwarded, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';

const EXAMPLE_DIR = join(import.meta.dirname, '../../examples/browser');
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
  '--disable-quic',
  '--ignore-certificate-errors',
  '--host-resolver-rules=MAP *.test 127.0.0.1',
];
const TYPES: Record<string, string> = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8' };

let site: http.Server;
let sitePort = 0;
let broker: BrokerDouble;
let edge: EdgeHarness;
let edgePort = 0;
let browser: Browser;
/** One page at the exact allowed origin; its steps table accumulates across the tests below. */
let page: Page;
let acmeToken: string;
let tinyToken: string;

/** Serves the example's two files, nothing else. */
function startSite(): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const name = req.url === '/' ? 'index.html' : req.url === '/app.js' ? 'app.js' : null;
    if (name === null) {
      res.writeHead(404).end();
      return;
    }
    readFile(join(EXAMPLE_DIR, name)).then(
      (body) => res.writeHead(200, { 'content-type': TYPES[name.slice(name.lastIndexOf('.'))]!, 'cache-control': 'no-store' }).end(body),
      () => res.writeHead(500).end(),
    );
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function openPage(origin: string): Promise<Page> {
  const p = await browser.newPage();
  await p.goto(`${origin}/`);
  return p;
}

async function runFlow(p: Page, proxy: string, jwt: string): Promise<{ state: string; text: string }> {
  await p.fill('#proxy', proxy);
  await p.fill('#token', jwt);
  await p.click('#run');
  await p.waitForSelector('#result[data-state="ok"], #result[data-state="error"]', { timeout: 15000 });
  return { state: (await p.getAttribute('#result', 'data-state'))!, text: await p.innerText('#result') };
}

interface Row {
  step: string;
  status: string;
  retryAfter: string;
  rateLimit: string;
  protocol: string;
  detail: string;
}

function rows(p: Page): Promise<Row[]> {
  return p.$$eval('#steps tr[data-step]', (trs) =>
    trs.map((tr) => ({
      step: tr.getAttribute('data-step')!,
      status: tr.getAttribute('data-status') ?? '',
      retryAfter: tr.querySelector('.retry-after')!.textContent!,
      rateLimit: tr.querySelector('.ratelimit')!.textContent!,
      protocol: tr.querySelector('.proto')!.textContent!,
      detail: tr.querySelector('.detail')!.textContent!,
    })),
  );
}

const acmeUrl = () => `https://api.acme.test:${edgePort}`;

beforeAll(async () => {
  site = await startSite();
  sitePort = (site.address() as AddressInfo).port;
  broker = await startBrokerDouble({ name: 'b1', cors: true });
  const pageOrigin = `http://127.0.0.1:${sitePort}`;
  edge = await startEdge(
    testConfig([broker.url], {
      plans: { tiny: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestsPerSec: 1, requestBurst: 1 } } },
      tenants: {
        // acme and tiny share one broker double: declared tenancy-aware, as a shared broker must be.
        acme: { hosts: ['api.acme.test'], tenancyAwareBrokers: true, cors: { origins: [pageOrigin, `http://*.acme.test:${sitePort}`] } },
        tiny: { plan: 'tiny', hosts: ['api.tiny.test'], brokers: [broker.url], tenancyAwareBrokers: true, cors: { origins: [pageOrigin] } },
      },
    }),
  );
  edgePort = Number(new URL(edge.url).port);
  acmeToken = await token({ roles: ['read-write'], tenant: 'acme', sub: 'web-user' });
  tinyToken = await token({ roles: ['read-write'], tenant: 'tiny', sub: 'web-user' });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  page = await openPage(pageOrigin);
});
afterAll(async () => {
  await browser?.close();
  await edge?.close();
  await broker?.close();
  await new Promise((r) => site?.close(r));
});

describe('the browser example through queen-edge', () => {
  it('from an allowed origin: preflights pass, push, long-poll pop and ack complete over h2', async () => {
    const before = forwarded(broker).length;
    const result = await runFlow(page, acmeUrl(), acmeToken);
    expect(result, result.text).toMatchObject({ state: 'ok' });
    expect((await rows(page)).map((r) => [r.step, r.status, r.protocol])).toEqual([
      ['push', '201', 'h2'],
      ['pop (wait=true)', '200', 'h2'],
      ['ack', '200', 'h2'],
    ]);
    // The actual requests only leave the browser after their preflights succeeded; preflights
    // themselves are answered at the edge and never forwarded.
    const sent = forwarded(broker).slice(before);
    expect(sent.map((r) => `${r.method} ${r.path}`)).toEqual(['POST /api/v1/push', 'GET /api/v1/pop/queue/browser-demo', 'POST /api/v1/ack']);
    expect(sent[1]!.query.get('wait')).toBe('true');
  });

  it('reads RateLimit and Retry-After (exposed headers) and retries a 429 in place after Retry-After', async () => {
    const result = await runFlow(page, `https://api.tiny.test:${edgePort}`, tinyToken);
    expect(result, result.text).toMatchObject({ state: 'ok' });
    const tiny = (await rows(page)).slice(3);
    const limited = tiny.filter((r) => r.status === '429');
    expect(limited.length).toBeGreaterThan(0);
    for (const r of limited) {
      expect(r.retryAfter).toMatch(/^[1-9]\d*$/);
      expect(r.detail).toContain('rate_limited');
    }
    expect(tiny[0]).toMatchObject({ step: 'push', status: '201', rateLimit: expect.stringMatching(/^"requests";r=\d+;t=\d+$/) });
    // Each 429 is followed by a retry of the same step.
    const i = tiny.findIndex((r) => r.status === '429');
    expect(tiny[i + 1]!.step).toMatch(/\(retry 1\)$/);
    expect(tiny.at(-1)).toMatchObject({ step: expect.stringMatching(/^ack/), status: '200' });
  });

  it('from an origin not in the list: the browser blocks the call and the broker receives nothing', async () => {
    const evil = await openPage(`http://evil.test:${sitePort}`);
    try {
      const before = forwarded(broker).length;
      const result = await runFlow(evil, acmeUrl(), acmeToken);
      expect(result.state).toBe('error');
      expect(await rows(evil)).toEqual([
        expect.objectContaining({ step: 'push', status: 'network-error', detail: expect.stringMatching(/TypeError.*accept the certificate/) }),
      ]);
      // A GET with a token is preflighted too, and refused the same way.
      const err = await evil.evaluate(
        ([url, jwt]) =>
          fetch(url!, { headers: { Authorization: `Bearer ${jwt}` } }).then(
            () => 'no error',
            (e: Error) => e.name,
          ),
        [`${acmeUrl()}/api/v1/pop/queue/browser-demo?consumerGroup=web`, acmeToken],
      );
      expect(err).toBe('TypeError');
      expect(forwarded(broker).length).toBe(before);
    } finally {
      await evil.close();
    }
  });

  it('a wildcard origin (http://*.acme.test:<port>) is allowed, its apex is not', async () => {
    const sub = await openPage(`http://app.acme.test:${sitePort}`);
    try {
      const result = await runFlow(sub, acmeUrl(), acmeToken);
      expect(result, result.text).toMatchObject({ state: 'ok' });
    } finally {
      await sub.close();
    }
    const apex = await openPage(`http://acme.test:${sitePort}`);
    try {
      expect((await runFlow(apex, acmeUrl(), acmeToken)).state).toBe('error');
    } finally {
      await apex.close();
    }
  });

  it('holds ten parked long polls and still completes a push and its pop on the same h2 connection', async () => {
    await page.fill('#proxy', acmeUrl());
    await page.fill('#token', acmeToken);
    await page.fill('#count', '10');
    await page.click('#hold');
    await waitFor(() => broker.parked() === 10, 5000, 'ten parked long polls at the broker');
    const parkedReqs = forwarded(broker).filter((r) => r.path.startsWith('/api/v1/pop/queue/browser-demo-idle-'));
    expect(parkedReqs).toHaveLength(10);

    const rowsBefore = (await rows(page)).length;
    const result = await runFlow(page, acmeUrl(), acmeToken);
    expect(result, result.text).toMatchObject({ state: 'ok' });
    expect((await rows(page)).slice(rowsBefore).map((r) => [r.step, r.status, r.protocol])).toEqual([
      ['push', '201', 'h2'],
      ['pop (wait=true)', '200', 'h2'],
      ['ack', '200', 'h2'],
    ]);
    // Still parked: the flow did not wait for a held poll to give up its connection.
    expect(broker.parked()).toBe(10);
    expect(parkedReqs.every((r) => !r.aborted)).toBe(true);
    expect(await page.getAttribute('#held', 'data-count')).toBe('10');

    const protocols = await page.evaluate((origin) => {
      const seen = performance.getEntriesByType('resource').filter((e) => e.name.startsWith(origin));
      return [...new Set(seen.map((e) => (e as unknown as { nextHopProtocol: string }).nextHopProtocol))];
    }, acmeUrl());
    expect(protocols).toEqual(['h2']);

    await mkdir(ARTIFACTS_DIR, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS_DIR, 'browser-example.png'), fullPage: true });

    // Releasing aborts the fetches; over h2 that is a stream reset, which aborts the upstream pops.
    await page.click('#release');
    await waitFor(() => broker.parked() === 0, 5000, 'the released polls to be aborted at the broker');
    expect(parkedReqs.every((r) => r.aborted)).toBe(true);
  });
});
