/** BodyBudget, BodyPace and HeadsInFlight: the accounts behind "Bodies in flight" (docs/limits.md). */
import { describe, expect, it } from 'vitest';
import { HeadsInFlight } from '../../src/limits/heads-in-flight.js';
import { BodyBudget } from '../../src/body/budget.js';
import { BodyPace, tooSlow } from '../../src/body/pace.js';

describe('BodyBudget', () => {
  it("claims a declared length of the tenant's own budget only: it holds none of the process's", () => {
    const b = new BodyBudget(100, 150);
    const a1 = b.open('a');
    expect(a1.claim(80)).toBeNull();
    expect(b.open('a').claim(30)?.code).toBe('rate_limited');
    expect([b.claimedBy('a'), b.heldBy('a'), b.heldBytes]).toEqual([80, 0, 0]);
    // Bytes as they arrive: within the claim, nothing more is claimed; beyond it (length unknown), the rest is.
    expect(a1.take(60)).toBeNull();
    expect([b.claimedBy('a'), b.heldBy('a'), b.heldBytes]).toEqual([80, 60, 60]);
    expect(a1.take(50)?.code).toBe('rate_limited');
  });

  it('a full process gives a tenant within its fair share the bytes of arriving bodies of tenants above theirs', () => {
    const b = new BodyBudget(100, 150);
    const evicted: string[] = [];
    const body = (tenant: string, n: number) => {
      const a = b.open(tenant);
      a.onEvict = (err) => evicted.push(`${tenant}:${a.held}:${err.code}`);
      expect(a.take(n)).toBeNull();
      return a;
    };
    const [x1, x2] = [body('x', 50), body('x', 40)];
    body('y', 60);
    expect(b.heldBytes).toBe(150);
    // z's share is 150 / 3 = 50: 20 of it come from x's largest body (x holds 90, the most).
    const z = b.open('z');
    expect(z.take(20)).toBeNull();
    expect(evicted).toEqual(['x:0:edge_overloaded']);
    expect([x1.held, x2.held, b.heldBy('x'), b.heldBytes]).toEqual([0, 40, 40, 120]);
    // Beyond its share z gets nothing taken from anyone: 503, and nothing more refused.
    expect(z.take(30)).toBeNull();
    expect(z.take(1)?.code).toBe('edge_overloaded');
    expect(evicted).toHaveLength(1);
  });

  it('bodies in whole are never taken back, and a share that cannot be freed refuses none', () => {
    const b = new BodyBudget(100, 100);
    const x = b.open('x');
    x.onEvict = () => expect.unreachable('a whole body is never refused');
    expect(x.take(100)).toBeNull();
    x.arrived();
    expect(b.open('y').take(10)?.code).toBe('edge_overloaded');
    expect(b.heldBy('x')).toBe(100);
  });

  it('gives back everything an account took, once', () => {
    const b = new BodyBudget(100, 150);
    const a = b.open('a');
    a.claim(10);
    a.take(40);
    a.take(20);
    a.close();
    a.close();
    expect([b.heldBy('a'), b.claimedBy('a'), b.heldBytes]).toEqual([0, 0, 0]);
    expect(b.open('a').take(100)).toBeNull();
  });
});

describe('BodyPace', () => {
  const s = { graceMs: 1000, minBytesPerSec: 1000 };
  it('asks nothing during the grace, then a byte per 1/minBytesPerSec s', () => {
    expect(tooSlow(1000, 0, s)).toBe(false);
    expect(tooSlow(1001, 0, s)).toBe(true);
    expect(tooSlow(3000, 2000, s)).toBe(false);
    expect(tooSlow(3001, 2000, s)).toBe(true);
  });

  it('cuts a slow body and one past its deadline; a body the edge is not reading keeps its clock waiting', () => {
    let now = 0;
    const pace = new BodyPace(s, 1000, () => now);
    const cut: string[] = [];
    const body = (name: string, bytes: () => number, reading: () => boolean, deadline = Infinity) => ({
      paceFrom: 0,
      paceBase: 0,
      paceDeadline: deadline,
      paceBytes: bytes,
      paceReading: reading,
      paceCut: (late: boolean) => cut.push(`${name}${late ? ':late' : ''}`),
    });
    const received = 0;
    let reading = false;
    pace.watch(
      body(
        'idle',
        () => 0,
        () => true,
      ),
    );
    pace.watch(
      body(
        'fast',
        () => 10_000,
        () => true,
        5000,
      ),
    );
    pace.watch(
      body(
        'waiting',
        () => received,
        () => reading,
      ),
    );
    now = 1500;
    pace.sweep();
    expect(cut).toEqual(['idle']);
    // Waiting for a connection from 0 to 4000 ms: its clock starts when the edge reads it.
    now = 4000;
    pace.sweep();
    reading = true;
    now = 4900;
    pace.sweep();
    expect(cut).toEqual(['idle']);
    now = 5100;
    pace.sweep();
    expect(cut).toEqual(['idle', 'fast:late', 'waiting']);
    expect(pace.size).toBe(0);
    pace.close();
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
