/**
 * Every byte a body takes from the budgets is given back, whichever way its request ends: after a
 * mix of bodies reset part way (h2 RST_STREAM, with and without a declared length), an h1 upload
 * whose client vanished, a malformed body and a good one, one body of the whole process budget
 * fits again. A byte leaked on any path would keep it refused.
 */
import http2 from 'node:http2';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, h2Session, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitFor, waitForEvent } from '../helpers/wait.js';

const KiB = 1024;
const BUDGET = 64 * KiB;

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
let jwt: string;

beforeAll(async () => {
  broker = await startBrokerDouble();
  // Tenant and process budgets equal: a byte leaked by any request shows in the whole-budget push.
  edge = await startEdge(testConfig([broker.url], { server: { bodyBudget: { perTenantBytes: BUDGET, perProcessBytes: BUDGET, deadlineMs: 5000 } } }));
  jwt = await token({ roles: ['read-write'], tenant: 'acme' });
  session = await h2Session(edge.url);
});
afterAll(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
});

/** An h2 push that sends 10 KiB and is reset once the edge has seen its first bytes. */
async function resetPart(declared: number | null): Promise<void> {
  const headers: http2.OutgoingHttpHeaders = {
    ':method': 'POST',
    ':path': '/api/v1/push',
    ':authority': 'acme.localhost',
    authorization: `Bearer ${jwt}`,
    'content-type': 'application/json',
  };
  if (declared !== null) headers['content-length'] = String(declared);
  const stream = session.request(headers, { endStream: false });
  stream.on('error', () => {});
  await new Promise<void>((resolve) => stream.write(Buffer.alloc(10 * KiB, 0x20), () => resolve()));
  stream.close(http2.constants.NGHTTP2_CANCEL);
  await waitForEvent(stream, 'close', 5000, 'the cancelled stream to close');
}

/** An HTTP/1.1 upload that declares 16 KiB, sends 10 KiB and drops its connection. */
async function h1Vanish(): Promise<void> {
  const port = Number(new URL(edge.url).port);
  const socket = tls.connect({ host: '127.0.0.1', port, servername: 'acme.localhost', rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
  socket.on('error', () => {});
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  const head = `POST /api/v1/push HTTP/1.1\r\nhost: acme.localhost\r\nauthorization: Bearer ${jwt}\r\ncontent-type: application/json\r\ncontent-length: ${16 * KiB}\r\n\r\n`;
  await new Promise<void>((resolve) => socket.write(Buffer.concat([Buffer.from(head), Buffer.alloc(10 * KiB, 0x20)]), () => resolve()));
  socket.destroy();
}

describe('body budget release', () => {
  it('gives back every byte taken, however the request ended', async () => {
    expect((await call(edge, 'POST', '/api/v1/push', { token: jwt, body: '{"items":[' })).status).toBe(400);
    expect((await call(edge, 'POST', '/api/v1/push', { token: jwt, body: { items: [{ queue: 'q', payload: 'x' }] } })).status).toBe(201);
    for (let round = 0; round < 3; round++) await Promise.all([resetPart(16 * KiB), resetPart(null), h1Vanish()]);
    // The resets end at the edge after the client saw them: wait until the whole budget is free again.
    const whole = { items: [{ queue: 'q', payload: 'x'.repeat(BUDGET - 100) }] };
    expect(JSON.stringify(whole).length).toBeLessThanOrEqual(BUDGET);
    await waitFor(
      async () => (await call(edge, 'POST', '/api/v1/push', { token: jwt, body: whole })).status === 201,
      10_000,
      'a body of the whole budget admitted (every byte given back)',
    );
  });
});
