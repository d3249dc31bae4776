import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { ackFacts, pushFacts, transactionFacts } from '../../src/stages/body.js';

const b = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));

describe('body facts', () => {
  it('counts push items and keeps the first', () => {
    expect(pushFacts(b({ items: [{ queue: 'q', partition: 'p', payload: 1 }, { queue: 'q', payload: 2 }] }))).toEqual({
      messages: 2,
      firstItem: { queue: 'q', partition: 'p', payload: 1 },
      leaseId: null,
    });
  });

  it('reports the parser message for malformed JSON', () => {
    const r = pushFacts(b('{"items": [}'));
    expect(isEdgeError(r) && r.code).toBe('invalid_request');
    expect(isEdgeError(r) && r.message).toMatch(/^malformed JSON: /);
  });

  it.each([b({ items: 'x' }), b([1]), b('null'), b({})])('refuses a push without an items array', (buf) => {
    const r = pushFacts(buf);
    expect(isEdgeError(r) && r.code).toBe('invalid_request');
  });

  it('refuses deep nesting without recursing', () => {
    const deep = b('{"items":[' + '['.repeat(10000) + ']'.repeat(10000) + ']}');
    const r = pushFacts(deep);
    expect(isEdgeError(r) && r.message).toMatch(/nested deeper/);
    expect(isEdgeError(pushFacts(b('{"items":[{"queue":"q","payload":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}]}')))).toBe(false);
  });

  it('counts transaction pushes and finds the lease', () => {
    const r = transactionFacts(b({ operations: [{ type: 'push', items: [{ queue: 'a', payload: 1 }, { queue: 'a', payload: 2 }] }, { type: 'ack', leaseId: 'L2' }, { type: 'push', items: [{ queue: 'b', payload: 3 }] }], requiredLeases: ['L1'] }));
    expect(r).toEqual({ messages: 3, firstItem: { queue: 'a', payload: 1 }, leaseId: 'L1' });
    expect(isEdgeError(transactionFacts(b({ operations: [{ type: 'push', items: 1 }] })))).toBe(true);
  });

  it('reads the lease of an ack and of an ack batch', () => {
    expect(ackFacts(b({ transactionId: 't', partitionId: 'p', leaseId: 'L' }))).toMatchObject({ leaseId: 'L' });
    expect(ackFacts(b({ acknowledgments: [{ leaseId: 'L3' }, { leaseId: 'L4' }] }))).toMatchObject({ leaseId: 'L3' });
    expect(ackFacts(b({ acknowledgments: [] }))).toMatchObject({ leaseId: null });
  });
});
