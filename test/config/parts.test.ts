/** A configuration split for another process and joined again is the same configuration; a file read against what the receiver holds carries its changed tenants only. */
import { describe, expect, it } from 'vitest';
import { ConfigJoin, splitConfig, type TenantsPart } from '../../src/config/parts.js';
import type { RawConfig } from '../../src/config/schema.js';
import { changesOf, rememberChanges } from '../../src/config/tenant-ids.js';
import { testConfig } from '../helpers/edge.js';

function withTenants(n: number): RawConfig {
  const base = testConfig(['http://127.0.0.1:1']);
  const tenants: RawConfig['tenants'] = {};
  const sample = Object.values(base.tenants)[0]!;
  for (let i = 0; i < n; i++) tenants[`t${i}`] = { ...sample, hosts: [`t${i}.localhost`] };
  return { ...base, tenants };
}

/** Parts as the receiver gets them: each a copy, as IPC makes one. */
function sent(parts: Iterable<TenantsPart>): TenantsPart[] {
  return [...parts].map((p) => JSON.parse(JSON.stringify(p)) as TenantsPart);
}

describe('splitConfig and ConfigJoin', () => {
  it.each([0, 1, 499, 500, 501, 1234])('%i tenants: every tenant carried, parts of at most the size, joined back equal and in order', (n) => {
    const config = withTenants(n);
    const { head, parts } = splitConfig(config, null, 500);
    expect(head.changed).toBeNull();
    expect(head.config).not.toHaveProperty('tenants');
    const join = new ConfigJoin(head, null);
    const all = sent(parts);
    expect(all).toHaveLength(Math.ceil(n / 500));
    for (const part of all) {
      expect(part.ids.length).toBeLessThanOrEqual(500);
      expect(Object.keys(part.tenants)).toEqual(part.ids);
      join.add(part);
    }
    const joined = join.config();
    expect(joined).toEqual(config);
    expect(Object.keys(joined.tenants)).toEqual(Object.keys(config.tenants));
  });

  it('a file read against the map the receiver holds carries the changed tenants only; the others are the receiver own objects', () => {
    const before = withTenants(1200);
    const { t5: _removed, ...kept } = before.tenants;
    const tenants = { ...kept, t7: { ...before.tenants.t7!, status: 'suspended' as const }, added: { ...before.tenants.t1!, hosts: ['added.localhost'] } };
    const next: RawConfig = { ...before, tenants };
    rememberChanges(tenants, { base: before.tenants, changed: ['t7', 'added', 't5'] });
    // The receiver holds the map the file was read against.
    const held = JSON.parse(JSON.stringify(before.tenants)) as RawConfig['tenants'];
    const { head, parts } = splitConfig(next, before.tenants, 500);
    expect(head.changed).toEqual(['t7', 'added', 't5']);
    const all = sent(parts);
    expect(all.flatMap((p) => Object.keys(p.tenants)).sort()).toEqual(['added', 't7']);
    const join = new ConfigJoin(head, held);
    for (const part of all) join.add(part);
    const joined = join.config();
    expect(joined).toEqual(next);
    expect(Object.keys(joined.tenants)).toEqual(Object.keys(next.tenants));
    expect(joined.tenants.t8).toBe(held.t8);
    expect(changesOf(joined.tenants)).toEqual({ base: held, changed: ['t7', 'added', 't5'] });
  });

  it('a file read against another map than the receiver holds carries every tenant', () => {
    const before = withTenants(10);
    const next = withTenants(10);
    rememberChanges(next.tenants, { base: before.tenants, changed: [] });
    const { head, parts } = splitConfig(next, withTenants(10).tenants);
    expect(head.changed).toBeNull();
    expect(sent(parts).flatMap((p) => Object.keys(p.tenants))).toHaveLength(10);
  });
});
