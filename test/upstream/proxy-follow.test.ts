import { afterEach, describe, expect, it, vi } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { compilePlan, compileTenant } from '../../src/tenants/model.js';
import { createClusters, type Clusters } from '../../src/upstream/clusters.js';
import { createBrokerPools, type BrokerPools } from '../../src/upstream/pools.js';
import { createUpstreamProxy } from '../../src/upstream/proxy.js';
import { testConfig } from '../helpers/edge.js';

const [A, B, C] = ['http://127.0.0.1:1', 'http://127.0.0.1:2', 'http://127.0.0.1:3'];
const PLAN = compilePlan('free', {
  features: [],
  limits: { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1 << 20, maxBatch: 1000 },
  quotas: { messagesPerMonth: 1e6, ingressBytesPerMonth: 1e10 },
  storageBytes: 1e9,
});
const tenant = (id: string, brokers: string[]) =>
  compileTenant(id, { status: 'active', plan: 'free', hosts: [], brokers, cors: { origins: [] }, boundedLoadFactor: null }, PLAN);

let clusters: Clusters;
let pools: BrokerPools;
afterEach(async () => {
  await clusters.close();
  await pools.close();
});

describe('upstream proxy: the broker set follows the directory by URL', () => {
  it('a new URL is checked and served; a removed one loses its pools and checks; one still listed keeps them', async () => {
    const probed: string[] = [];
    clusters = createClusters(
      { healthIntervalMs: 20, healthTimeoutMs: 100, downAfter: 2, upAfter: 2 },
      {
        log: silentLogger(),
        probe: async (url) => {
          probed.push(url);
          return true;
        },
      },
    );
    pools = createBrokerPools(testConfig([A]).upstream);
    const proxy = createUpstreamProxy({ clusters, pools, log: silentLogger() });
    const stays = tenant('t1', [A]);
    const old = tenant('t2', [A, B]);
    clusters.start([stays, old]);
    const kept = pools.get(A, false);
    const gone = [pools.get(B, false), pools.get(B, true)];

    // t2 moves from [A, B] to [C]: C gains its first tenant, B loses its last, A keeps t1.
    proxy.follow({ added: [C], removed: [B] });
    expect(gone.map((p) => p.closed)).toEqual([true, true]);
    expect(kept.closed).toBe(false);
    const from = probed.length;
    await vi.waitFor(() => expect(probed.slice(from).filter((u) => u === C).length).toBeGreaterThanOrEqual(2), { timeout: 3000 });
    expect(probed.slice(from)).toContain(A);
    expect(probed.slice(from)).not.toContain(B);
    expect(proxy.reachable(tenant('t2', [C]))).toBe(true);
    // The request holding t2 from before still has A; B is down to it.
    expect(clusters.snapshot([old])[0]!.brokers.map((b) => [b.url, b.healthy])).toEqual([
      [A, true],
      [B, false],
    ]);
    expect(proxy.reachable(tenant('t3', [B]))).toBe(false);
  });
});
