/** Tracing: the W3C traceparent reaches the broker and its trace id the access log. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { accessLine as accessLineOf, capturingLogger } from '../helpers/logs.js';

let broker: BrokerDouble;
let h: EdgeHarness;
const captured = capturingLogger('info');

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  h = await startEdge(testConfig([broker.url], { log: { level: 'info' } }), { log: captured.log });
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
});

const accessLine = (reqId: unknown) => accessLineOf(captured, reqId);

describe('traceparent', () => {
  it('is forwarded to the broker unchanged (with tracestate) and its trace id is in the access log line', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const traceparent = `00-${traceId}-00f067aa0ba902b7-01`;
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await call(h, 'POST', '/api/v1/push', {
      token: tok,
      body: { items: [{ queue: 'q', payload: 1 }] },
      headers: { traceparent, tracestate: 'vendor=1' },
    });
    expect(r.status).toBe(201);
    const sent = forwarded(broker).at(-1)!;
    expect(sent.headers.traceparent).toBe(traceparent);
    expect(sent.headers.tracestate).toBe('vendor=1');
    const access = await accessLine(r.headers['x-request-id']);
    expect(access).toMatchObject({ trace: traceId, route: 'push', tenant: 'acme', status: 201 });
  });

  it('a request without traceparent logs trace null', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const r = await call(h, 'GET', '/api/v1/pop/queue/q2', { token: tok });
    expect(await accessLine(r.headers['x-request-id'])).toMatchObject({ trace: null });
  });
});
