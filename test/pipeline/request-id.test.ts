/** Request ids are version-4 UUIDs, all different, across refills of the random pool. */
import { expect, it } from 'vitest';
import { newRequestId } from '../../src/pipeline/request-id.js';

it('makes canonical v4 UUIDs, none repeated over several refills of its pool, every hex digit used', () => {
  const seen = new Set<string>();
  const digits = new Set<string>();
  for (let i = 0; i < 2000; i++) {
    const id = newRequestId();
    expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    seen.add(id);
    for (const c of id.replace(/-/g, '')) digits.add(c);
  }
  expect(seen.size).toBe(2000);
  expect(digits.size).toBe(16);
});
