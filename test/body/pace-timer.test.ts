/** The body pace's sweep timer: started once for back-to-back bodies, stopped by a sweep that finds none. */
import { afterEach, expect, it, vi } from 'vitest';
import { BodyPace, type PacedBody } from '../../src/body/pace.js';

afterEach(() => {
  vi.restoreAllMocks();
});

const body = (): PacedBody => ({
  paceFrom: 0,
  paceBase: 0,
  paceDeadline: Infinity,
  paceBytes: () => 0,
  paceReading: () => true,
  paceCut: () => {},
});

it('keeps one interval while bodies come one after another, and stops it at the first sweep with none left', () => {
  const started = vi.spyOn(globalThis, 'setInterval');
  const pace = new BodyPace({ graceMs: 1000, minBytesPerSec: 1 }, 1000);
  for (let i = 0; i < 100; i++) {
    const b = body();
    pace.watch(b);
    pace.unwatch(b);
  }
  expect(started).toHaveBeenCalledTimes(1);
  expect(pace.ticking).toBe(true);
  pace.sweep();
  expect(pace.ticking).toBe(false);
  pace.watch(body());
  expect([started.mock.calls.length, pace.ticking]).toEqual([2, true]);
  pace.close();
  expect(pace.ticking).toBe(false);
});
