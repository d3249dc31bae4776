/**
 * A configuration reload that lands while the directory builds itself again (a plan written, a
 * missed change message) is not undone when that build is swapped in.
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/observability/log.js';
import { BrokerAddresses } from '../../src/tenants/broker-addresses.js';
import { createTenantStore, type TenantStore, type WriteResult } from '../../src/tenants/store.js';
import { connectTest, flushPrefix, SHARED_REDIS_URL, uniquePrefix } from '../helpers/redis.js';

const LIMITS = { requestsPerSec: 50, requestBurst: 100, messagesPerSec: 500, messageBurst: 1000, parkedPolls: 20, maxPayloadBytes: 1048576, maxBatch: 1000 };
const PLAN = { features: [], limits: LIMITS, quotas: { messagesPerMonth: 1000, ingressBytesPerMonth: 10000 }, storageBytes: 1000 };
const SHARED = 'http://10.0.0.1:6632';
const MOVED = 'http://10.0.0.17:6632';
const prefix = uniquePrefix();
// Enough tenants that a full build takes several turns of the event loop.
const tenants: Record<string, unknown> = {};
for (let i = 0; i < 20_000; i++) tenants[`t${i}`] = { plan: 'free', hosts: [`t${i}.example.com`], brokers: [SHARED], tenancyAwareBrokers: true };
const zeta = { plan: 'free', hosts: ['zeta.example.com'], brokers: [SHARED], tenancyAwareBrokers: true };
const config = parseConfig({ redis: { keyPrefix: prefix }, plans: { free: PLAN }, tenants: { ...tenants, zeta } });
const reloaded = parseConfig({ redis: { keyPrefix: prefix }, plans: { free: PLAN }, tenants: { ...tenants, zeta: { ...zeta, brokers: [MOVED] } } });

let client: Redis;
let store: TenantStore;
/** Called with every broker identity the directory asks for: its builds, in slices. */
let onIdentity: (() => void) | null = null;
let identities = 0;

beforeAll(async () => {
  client = await connectTest(SHARED_REDIS_URL);
  const addresses = new BrokerAddresses();
  const own = addresses.identitiesOf;
  Object.defineProperty(addresses, 'identitiesOf', {
    value: (url: string) => {
      identities++;
      onIdentity?.();
      return own(url);
    },
  });
  store = await createTenantStore(config, { log: silentLogger(), redis: client, refreshMs: 60_000, addresses });
}, 30_000);

afterAll(async () => {
  await store.close();
  await flushPrefix(client, prefix);
  client.disconnect();
});

describe('a file reload during a full build', () => {
  it('is in force once the build is swapped in', async () => {
    let reload: { result: WriteResult; at: number } | null = null;
    // The first identity the build asks for: the reload runs at its next turn, between two slices.
    onIdentity = () => {
      onIdentity = null;
      setImmediate(() => {
        reload = { result: store.reloadFile(reloaded), at: identities };
      });
    };
    // A plan written: every tenant is placed again, in a full build.
    expect(await store.putPlan('extra', PLAN)).toEqual({ ok: true });
    expect(reload).not.toBeNull();
    expect(reload!.result).toEqual({ ok: true });
    // The reload came while the build still ran.
    expect(identities).toBeGreaterThan(reload!.at);
    expect(store.byId('zeta')?.brokers).toEqual([MOVED]);
  });
});
