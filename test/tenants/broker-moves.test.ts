import { describe, expect, it } from 'vitest';
import { brokerChange, brokersSwapped } from '../../src/tenants/broker-moves.js';

const counts = (...urls: string[]) => new Map(urls.map((u) => [u, 1]));

describe('broker moves', () => {
  it('tells the URLs that came into force and those that left, not those that did both', () => {
    const moves = new Map([
      ['a', false], // new, in force now
      ['b', true], // in force before, gone now
      ['c', false], // came and went
      ['d', true], // went and came back
    ]);
    expect(brokerChange(counts('a', 'd', 'x'), moves)).toEqual({ added: ['a'], removed: ['b'] });
    expect(brokerChange(counts('x'), new Map([['c', false]]))).toBeNull();
    expect(brokerChange(counts('x'), new Map())).toBeNull();
  });

  it('compares a full build with what subscribers were told of the directory it replaces', () => {
    // `before` has a and b in force, told; c came in untold; d left untold.
    const before = {
      brokerUrls: counts('a', 'b', 'c'),
      brokerMoves: new Map([
        ['c', false],
        ['d', true],
      ]),
    };
    // The build lists b, c and e: a and d are gone for subscribers, e is new, c is new too (never told).
    const next = {
      brokerUrls: counts('b', 'c', 'e'),
      brokerMoves: new Map([
        ['b', false],
        ['c', false],
        ['e', false],
      ]),
    };
    expect(brokersSwapped(before, next)).toEqual({ added: ['c', 'e'], removed: ['a', 'd'] });
    expect(brokersSwapped({ brokerUrls: counts('a'), brokerMoves: new Map() }, { brokerUrls: counts('a'), brokerMoves: new Map() })).toBeNull();
  });
});
