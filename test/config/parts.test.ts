/** A configuration split for another thread or process and joined again is the same configuration. */
import { describe, expect, it } from 'vitest';
import { ConfigJoin, splitConfig } from '../../src/config/parts.js';
import type { RawConfig } from '../../src/config/schema.js';
import { testConfig } from '../helpers/edge.js';

function withTenants(n: number): RawConfig {
  const base = testConfig(['http://127.0.0.1:1']);
  const tenants: RawConfig['tenants'] = {};
  const sample = Object.values(base.tenants)[0]!;
  for (let i = 0; i < n; i++) tenants[`t${i}`] = { ...sample, hosts: [`t${i}.localhost`] };
  return { ...base, tenants };
}

describe('splitConfig and ConfigJoin', () => {
  it.each([0, 1, 499, 500, 501, 1234])('%i tenants: parts of at most the size, joined back equal and in order', (n) => {
    const config = withTenants(n);
    const { head, parts } = splitConfig(config, 500);
    expect(head).not.toHaveProperty('tenants');
    const join = new ConfigJoin(head);
    let count = 0;
    for (const part of parts) {
      expect(Object.keys(part).length).toBeGreaterThan(0);
      expect(Object.keys(part).length).toBeLessThanOrEqual(500);
      join.add(part);
      count++;
    }
    expect(count).toBe(Math.ceil(n / 500));
    const joined = join.config();
    expect(joined).toEqual(config);
    expect(Object.keys(joined.tenants)).toEqual(Object.keys(config.tenants));
  });
});
