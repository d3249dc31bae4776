/** /readyz (docs/operating.md): not ready while no broker is reachable; ready again when one is. */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startBrokerDouble } from '../helpers/broker-double.js';
import { startEdge, testConfig } from '../helpers/edge.js';

async function readiness(adminUrl: string): Promise<[number, unknown]> {
  const r = await request(`${adminUrl}/readyz`);
  return [r.statusCode, await r.body.json()];
}

describe('readiness', () => {
  it('turns 503 "no broker reachable" when every broker is down, and 200 when one comes back', async () => {
    const broker = await startBrokerDouble();
    const edge = await startEdge(testConfig([broker.url], { upstream: { healthIntervalMs: 100, healthTimeoutMs: 500, downAfter: 1, upAfter: 1 } }));
    try {
      expect(await readiness(edge.adminUrl)).toEqual([200, { status: 'ready' }]);
      await broker.close();
      await expect.poll(() => readiness(edge.adminUrl), { timeout: 5000, interval: 50 }).toEqual([503, { status: 'not_ready', reason: 'no broker reachable' }]);
      await broker.restart();
      await expect.poll(() => readiness(edge.adminUrl), { timeout: 5000, interval: 50 }).toEqual([200, { status: 'ready' }]);
    } finally {
      await edge.close();
      await broker.close();
    }
  });
});
