/** The many-tenants bench scenario's generated configuration is one the edge accepts (never a speed check). */
import { describe, expect, it } from 'vitest';
import { manyTenantsConfig, tenantId } from '../../bench/many-tenants.js';
import { parseConfig } from '../../src/config/load.js';
import { compileTables } from '../../src/tables.js';

describe('many-tenants scenario', () => {
  it('generates N valid tenants over four shared brokers, and suspends the one a reload changes', () => {
    const settings = {
      port: 8443,
      adminPort: 9090,
      cert: '/dev/null',
      key: '/dev/null',
      brokers: [1, 2, 3, 4].map((p) => `http://127.0.0.1:${6630 + p}`),
      redisUrl: 'redis://127.0.0.1:6379',
    };
    const tables = compileTables(parseConfig(manyTenantsConfig(1000, settings, 999), {}));
    expect(tables.tenants).toHaveLength(1000);
    expect(new Set(tables.tenants.flatMap((t) => t.brokers)).size).toBe(4);
    expect(tables.tenants.find((t) => t.id === tenantId(999))?.status).toBe('suspended');
    expect(tables.tenants.filter((t) => t.status === 'suspended')).toHaveLength(1);
  });
});
