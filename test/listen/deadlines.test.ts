/** Deadlines swept together: due items expire in order, once; removed ones never; the timer stops when idle. */
import { expect, it } from 'vitest';
import { Deadlines } from '../../src/listen/deadlines.js';

it('expires what is due at a sweep, in order and once, never a removed item, and stops ticking when empty', () => {
  let now = 0;
  const expired: string[] = [];
  const d = new Deadlines<string>(
    100,
    1000,
    (k) => expired.push(k),
    () => now,
  );
  d.add('a');
  now = 10;
  d.add('b');
  d.add('c');
  d.delete('b');
  now = 105;
  d.sweep();
  expect(expired).toEqual(['a']);
  now = 200;
  d.sweep();
  expect([expired, d.size, d.ticking]).toEqual([['a', 'c'], 0, true]);
  d.sweep();
  expect(d.ticking).toBe(false);
  d.add('d');
  expect(d.ticking).toBe(true);
  d.close();
  expect([d.ticking, d.size]).toEqual([false, 0]);
});
