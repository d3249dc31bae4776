/**
 * A request waiting for its tenant's place on a shared broker when the directory drops that broker
 * does not send to it once a place frees, nor open a new pool to it (a pool nothing would close).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { readReply, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

const harness: { brokers: BrokerDouble[]; edge?: EdgeHarness } = { brokers: [] };
afterEach(async () => {
  await harness.edge?.close();
  for (const b of harness.brokers.splice(0)) await b.close();
});

const HOLD = '/api/v1/status/queues';
const WAIT = '/api/v1/consumer-groups';

describe('proxy: a broker removed while requests wait for a place on it', () => {
  it('the waiting request is not sent to the removed broker', async () => {
    const [x, y] = await Promise.all([startBrokerDouble(), startBrokerDouble()]);
    harness.brokers.push(x, y);
    x.faultWhen((r) => (r.path === HOLD ? 'hang' : null));
    // One connection, one place per tenant, a queue of one: a third request is refused at once.
    const config = (brokers: string[]) => testConfig(brokers, { upstream: { connections: 1 }, tenants: { acme: { tenancyAwareBrokers: true } } });
    const edge = await startEdge(config([x.url]));
    harness.edge = edge;
    const headers = { host: 'acme.localhost', authorization: `Bearer ${await token({ roles: ['read-write'], tenant: 'acme' })}` };
    const send = (path: string, signal?: AbortSignal) => request(`${edge.url}${path}`, { headers, dispatcher: edge.dispatcher, signal }).then(readReply);

    const hold = new AbortController();
    const held = send(HOLD, hold.signal).catch(() => null);
    await x.waitForRequests(1, (r) => r.path === HOLD);
    // Two more: one waits for the place, the other finds the queue full (429): proof that one waits.
    const waiting = [send(WAIT), send(WAIT)];
    const first = await Promise.race(waiting.map((p, i) => p.then((r) => ({ r, i }))));
    expect(first.r.status).toBe(429);
    const waiter = waiting[1 - first.i]!;

    // acme moves to y: x loses its last tenant. Then the held request ends and frees the place.
    await edge.app.reload(config([y.url]));
    hold.abort();
    await held;
    const answer = await waiter;
    expect(x.requests.filter((r) => r.path === WAIT)).toEqual([]);
    expect(answer.status).toBe(503);
  });
});
