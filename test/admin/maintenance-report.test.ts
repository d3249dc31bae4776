/**
 * A maintenance switch a broker refuses (it answers 404: a broker without the system routes) is
 * reported as what happened: the API names the broker and its status, the CLI shows every
 * broker's outcome (table or --json) and exits 1, and the audit line says the switch failed.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { ADMIN_TOKEN, runCli } from './admin-call.js';

let b1: BrokerDouble;
let old: Server;
let oldUrl: string;
let edge: EdgeHarness;
const captured = capturingLogger('info');

beforeAll(async () => {
  b1 = await startBrokerDouble({ name: 'b1' });
  // Healthy, but without the maintenance routes.
  old = createServer((req, res) => {
    const body = req.url === '/health' ? '{"status":"healthy"}' : '{"error":"not found"}';
    res.writeHead(req.url === '/health' ? 200 : 404, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((done) => old.listen(0, '127.0.0.1', done));
  oldUrl = `http://127.0.0.1:${(old.address() as AddressInfo).port}`;
  edge = await startEdge(testConfig([b1.url, oldUrl], { server: { admin: { token: ADMIN_TOKEN } } }), { log: captured.log });
});

afterAll(async () => {
  await edge?.close();
  await b1?.close();
  old?.close();
});

const cli = (...argv: string[]) => runCli(edge, ...argv);

describe('a maintenance switch a broker answers with 404', () => {
  it("--json prints every broker's outcome, the message names the status, exit 1", async () => {
    const r = await cli('maintenance', 'acme', 'on', '--json');
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.out);
    expect(doc.brokers).toEqual([
      { url: b1.url, maintenance: true, popMaintenance: false },
      { url: oldUrl, error: expect.stringContaining('broker answered 404'), status: 404 },
    ]);
    expect(r.err).toContain(`${oldUrl}: broker answered 404`);
    expect(r.err).not.toContain('did not answer');
  });

  it('the table shows the error per broker; the audit line records a partial switch', async () => {
    const r = await cli('maintenance', 'acme', 'off');
    expect(r.code).toBe(1);
    expect(r.out.split('\n')[0]).toMatch(/^BROKER\s+MAINTENANCE\s+POP_MAINTENANCE\s+ERROR$/);
    expect(r.out).toMatch(new RegExp(`^${oldUrl.replace(/[.]/g, '\\.')}\\s+\\?\\s+\\?\\s+broker answered 404`, 'm'));
    const audit = captured.lines.filter((l) => l.msg === 'admin change' && l.action === 'broker.maintenance');
    expect(audit.map((l) => [l.outcome, (l.failed as Array<{ url: string }>).map((f) => f.url)])).toEqual([
      ['partial', [oldUrl]],
      ['partial', [oldUrl]],
    ]);
  });

  it('a broker that is down is reported as not answering', async () => {
    old.closeAllConnections();
    await new Promise<void>((done) => old.close(() => done()));
    const r = await cli('maintenance', 'acme', '--broker', oldUrl);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`${oldUrl}: broker did not answer`);
  });
});
