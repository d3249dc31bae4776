import { describe, expect, it } from 'vitest';
import { eachTenant, inSlices, rememberTenantIds, SLICE_MS, tenantIds } from '../../src/config/tenant-ids.js';
import type { RawTenant } from '../../src/config/schema.js';

/** Holds the thread for `ms`: work that takes time, without depending on how fast the machine is. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

describe('tenant ids and sliced work', () => {
  it('lists a map once, or takes the list its builder remembered', () => {
    const tenants = { b: {}, a: {} } as unknown as Record<string, RawTenant>;
    const ids = tenantIds(tenants);
    expect(ids).toEqual(['b', 'a']);
    expect(tenantIds(tenants)).toBe(ids);
    const built = { x: {} } as unknown as Record<string, RawTenant>;
    const given = ['x'];
    rememberTenantIds(built, given);
    expect(tenantIds(built)).toBe(given);
  });

  it('visits every item in order, and lets the event loop turn between slices', async () => {
    const items = Array.from({ length: 640 }, (_, i) => i);
    const seen: number[] = [];
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    // Each item holds the thread a little: the whole is many slices long.
    const yields = await inSlices(items, (i) => {
      seen.push(i);
      busy((4 * SLICE_MS) / items.length + 0.05);
    });
    clearInterval(ticker);
    expect(seen).toEqual(items);
    expect(yields).toBeGreaterThan(0);
    expect(turns).toBeGreaterThan(0);
  });

  it('finishes quick work in one go', async () => {
    const seen: string[] = [];
    const tenants = { a: { plan: 'p' }, b: { plan: 'q' } } as unknown as Record<string, RawTenant>;
    expect(await eachTenant(tenants, (id, t) => seen.push(`${id}:${t.plan}`))).toBe(0);
    expect(seen).toEqual(['a:p', 'b:q']);
  });
});
