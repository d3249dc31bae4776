import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { ackFacts, pushFacts, transactionFacts } from '../../src/body/facts.js';

const b = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));

describe('body facts', () => {
  it('counts push items and keeps the first', () => {
    expect(
      pushFacts(
        b({
          items: [
            { queue: 'q', partition: 'p', payload: 1 },
            { queue: 'q', payload: 2 },
          ],
        }),
      ),
    ).toEqual({
      messages: 2,
      firstItem: { queue: 'q', partition: 'p', payload: 1 },
      leaseId: null,
      acks: 0,
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
    const deep = b(`{"items":[${'['.repeat(10000)}${']'.repeat(10000)}]}`);
    const r = pushFacts(deep);
    expect(isEdgeError(r) && r.message).toMatch(/nested deeper/);
    expect(isEdgeError(pushFacts(b('{"items":[{"queue":"q","payload":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}]}')))).toBe(
      false,
    );
  });

  it('counts transaction pushes and acks and finds the lease', () => {
    const r = transactionFacts(
      b({
        operations: [
          {
            type: 'push',
            items: [
              { queue: 'a', payload: 1 },
              { queue: 'a', payload: 2 },
            ],
          },
          { type: 'ack', leaseId: 'L2' },
          { type: 'push', items: [{ queue: 'b', payload: 3 }] },
          { type: 'ack', leaseId: 'L3' },
        ],
        requiredLeases: ['L1'],
      }),
    );
    expect(r).toEqual({ messages: 3, firstItem: { queue: 'a', payload: 1 }, leaseId: 'L1', acks: 2 });
    expect(isEdgeError(transactionFacts(b({ operations: [{ type: 'push', items: 1 }] })))).toBe(true);
    expect(transactionFacts(b({ operations: [] }))).toMatchObject({ code: 'invalid_request', message: 'operations array cannot be empty' });
  });

  it('reads the lease and the number of acknowledgements of an ack and of an ack batch', () => {
    expect(ackFacts(b({ transactionId: 't', partitionId: 'p', leaseId: 'L' }))).toMatchObject({ leaseId: 'L', acks: 1 });
    expect(ackFacts(b({ acknowledgments: [{ leaseId: 'L3' }, { leaseId: 'L4' }] }))).toMatchObject({ leaseId: 'L3', acks: 2 });
    expect(ackFacts(b({ acknowledgments: [] }))).toMatchObject({ leaseId: null, acks: 0 });
  });
});

describe('what the edge counts is what the broker acts on', () => {
  const items = (n: number) => Array.from({ length: n }, (_, i) => ({ queue: 'q', payload: i }));

  it.each([
    ['top-level items', `{"items":${JSON.stringify(items(200))},"items":[]}`, pushFacts],
    ['an item key', '{"items":[{"queue":"a","queue":"b","payload":1}]}', pushFacts],
    ['transaction operations', `{"operations":[{"type":"push","items":${JSON.stringify(items(5))}}],"operations":[]}`, transactionFacts],
    ['an operation type', '{"operations":[{"type":"ack","type":"push","items":[{"queue":"q","payload":1}]}]}', transactionFacts],
    ['ack lease ids', '{"leaseId":"a","leaseId":"b"}', ackFacts],
  ])('refuses duplicate keys: %s', (_name, text, facts) => {
    const r = facts(Buffer.from(text));
    expect(isEdgeError(r) && r.message).toBe('duplicate key in JSON object');
  });

  it('counts keys correctly around colons and escapes inside strings', () => {
    const r = pushFacts(b({ items: [{ queue: 'a:b', payload: { 'k:"\\': 'x:y', '': [':', { z: null }] } }] }));
    expect(isEdgeError(r)).toBe(false);
  });

  it.each([
    ['an escaped quote hiding a key', '{"items":[{"payload":"a\\",\\"items\\":[]"}],"items":[]}', true],
    ['a string ending in an escaped backslash', '{"items":[{"payload":"x\\\\"}],"items":[]}', true],
    ['three backslashes then a quote', '{"items":[{"payload":"\\\\\\"\\":"}]}', false],
    ['a string ending in an escaped backslash, no duplicate', '{"items":[{"payload":"x\\\\","p2":"y\\\\\\\\"}]}', false],
  ])('finds duplicates past escapes: %s', (_name, text, duplicate) => {
    expect(JSON.parse(text)).toBeTruthy();
    const r = pushFacts(Buffer.from(text));
    if (duplicate) expect(isEdgeError(r) && r.message).toBe('duplicate key in JSON object');
    else expect(isEdgeError(r)).toBe(false);
  });

  it('accepts every document without duplicates and counts its items, whatever its strings hold', () => {
    const text = fc.string({ unit: fc.constantFrom('"', '\\', ':', '{', '[', 'a', '\u00e9', '}', ']', ',') });
    const value = fc.letrec<{ v: unknown }>((tie) => ({
      v: fc.oneof({ depthSize: 'small' }, text, fc.integer(), fc.array(tie('v'), { maxLength: 3 }), fc.dictionary(text, tie('v'), { maxKeys: 3 })),
    })).v;
    fc.assert(
      fc.property(fc.array(value, { minLength: 1, maxLength: 4 }), (items) => {
        const r = pushFacts(Buffer.from(JSON.stringify({ items })));
        expect(r).toMatchObject({ messages: items.length });
      }),
      { numRuns: 300 },
    );
  });

  it('finds a duplicate key after strings of any length with quotes and backslashes (short ones scanned byte by byte, long ones searched)', () => {
    const text = fc.string({ unit: fc.constantFrom('"', '\\', ':', 'a', '\u00e9', '}', ','), maxLength: 80 });
    fc.assert(
      fc.property(fc.array(text, { minLength: 1, maxLength: 3 }), (payloads) => {
        const items = JSON.stringify(payloads.map((payload) => ({ payload })));
        const r = pushFacts(Buffer.from(`{"items":${items},"items":[]}`));
        expect(isEdgeError(r) && r.message).toBe('duplicate key in JSON object');
        expect(pushFacts(Buffer.from(`{"items":${items}}`))).toMatchObject({ messages: payloads.length });
      }),
      { numRuns: 300 },
    );
  });

  it.each([['PUSH'], ['Push'], [undefined], [' push'], [1]])('refuses a transaction operation typed %j', (type) => {
    const r = transactionFacts(b({ operations: [{ type, items: items(3) }] }));
    expect(isEdgeError(r) && r.code).toBe('invalid_request');
  });

  it('counts pushes and acks in a transaction', () => {
    const r = transactionFacts(
      b({
        operations: [
          { type: 'push', items: items(3) },
          { type: 'ack', transactionId: 't', leaseId: 'L' },
        ],
      }),
    );
    expect(r).toMatchObject({ messages: 3, leaseId: 'L', acks: 1 });
  });
});
