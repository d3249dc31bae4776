/** BodyBudget and HeadsInFlight: the accounts behind "Bodies in flight" (docs/limits.md). */
import { describe, expect, it } from 'vitest';
import { HeadsInFlight } from '../../src/limits/heads-in-flight.js';
import { BodyBudget } from '../../src/body/budget.js';

describe('BodyBudget', () => {
  it("refuses past the tenant's share first, then past the process's, taking nothing when it refuses", () => {
    const b = new BodyBudget(100, 150);
    const a1 = b.open('a');
    expect(a1.take(80)).toBeNull();
    expect(a1.take(30)?.code).toBe('rate_limited');
    expect(b.heldBy('a')).toBe(80);
    const other = b.open('b');
    expect(other.take(80)?.code).toBe('edge_overloaded');
    expect(other.take(70)).toBeNull();
    expect(b.heldBytes).toBe(150);
  });

  it('gives back everything an account took, once', () => {
    const b = new BodyBudget(100, 150);
    const a = b.open('a');
    a.take(40);
    a.take(20);
    a.close();
    a.close();
    expect([b.heldBy('a'), b.heldBytes]).toEqual([0, 0]);
    expect(b.open('a').take(100)).toBeNull();
  });
});

describe('HeadsInFlight', () => {
  it('lets a tenant have as many heads in flight as its burst, each release idempotent, tenants apart', () => {
    const h = new HeadsInFlight();
    const releases = [h.enter('a', 2), h.enter('a', 2)];
    expect(h.enter('a', 2)).toBeNull();
    expect(h.enter('b', 2)).not.toBeNull();
    releases[0]!();
    releases[0]!();
    expect(h.count('a')).toBe(1);
    expect(h.enter('a', 2)).not.toBeNull();
    expect(h.enter('a', 2)).toBeNull();
  });
});
