/** Drain order: traffic listeners stop first, the admin listener answers /readyz 503 meanwhile. */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble } from '../helpers/broker-double.js';
import { startEdge, testConfig, token } from '../helpers/edge.js';

describe('drain', () => {
  it('a new probe connection gets /readyz 503 while a parked poll drains, and the edge port refuses new work', async () => {
    const broker = await startBrokerDouble();
    const edge = await startEdge(testConfig([broker.url]));
    const rw = await token({ roles: ['read-write'], tenant: 'acme' });
    const parked = request(`${edge.url}/api/v1/pop/queue/drain?wait=true&timeout=20000`, {
      headers: { host: 'acme.localhost', authorization: `Bearer ${rw}` },
      dispatcher: edge.dispatcher,
    }).then(
      (r) => r.statusCode,
      () => 'cut',
    );
    await broker.waitForRequests(1, (q) => q.path === '/api/v1/pop/queue/drain');
    const closing = edge.app.close(1500);
    try {
      const ready = await request(`${edge.adminUrl}/readyz`, { reset: true });
      expect(ready.statusCode).toBe(503);
      expect(await ready.body.json()).toMatchObject({ status: 'not_ready', reason: 'draining' });
      const refused = await request(`${edge.httpUrl}/health`, { headers: { host: 'acme.localhost' }, reset: true }).then(
        () => 'served',
        (e: { code?: string }) => e.code,
      );
      expect(refused).toBe('ECONNREFUSED');
    } finally {
      await closing;
    }
    expect(await parked).toBe('cut');
    await expect.poll(() => broker.parked()).toBe(0);
    await broker.close();
  });
});
