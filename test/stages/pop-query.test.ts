import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { parsePopQuery } from '../../src/stages/pop-query.js';

const lp = { defaultTimeoutMs: 30000, maxTimeoutMs: 60000, slackMs: 5000 };

describe('parsePopQuery', () => {
  it('passes a plain pop through untouched', () => {
    const q = parsePopQuery('consumerGroup=billing&batch=10', 100, lp);
    expect(isEdgeError(q) ? q : { wait: q.wait, fwd: q.forwardQuery }).toEqual({ wait: false, fwd: 'consumerGroup=billing&batch=10' });
  });

  it('keeps a timeout under the maximum, caps one above it, and makes an absent one explicit', () => {
    const keep = parsePopQuery('wait=true&timeout=5000', 100, lp);
    const cap = parsePopQuery('wait=true&timeout=999999', 100, lp);
    const absent = parsePopQuery('wait=true', 100, lp);
    if (isEdgeError(keep) || isEdgeError(cap) || isEdgeError(absent)) throw new Error('unexpected refusal');
    expect([keep.timeoutMs, keep.forwardQuery]).toEqual([5000, 'wait=true&timeout=5000']);
    expect([cap.timeoutMs, cap.forwardQuery]).toEqual([60000, 'wait=true&timeout=60000']);
    expect([absent.timeoutMs, absent.forwardQuery]).toEqual([30000, 'wait=true&timeout=30000']);
  });

  it('rewrites only the timeout pair of a parked pop: other pairs keep their bytes, an encoded name is spelled plainly', () => {
    const absent = parsePopQuery('wait=true&consumerGroup=a%20b&partition=x+y', 100, lp);
    const encoded = parsePopQuery('t%69meout=5000&wait=true&consumerGroup=a%20b', 100, lp);
    if (isEdgeError(absent) || isEdgeError(encoded)) throw new Error('unexpected refusal');
    expect(absent.forwardQuery).toBe('wait=true&consumerGroup=a%20b&partition=x+y&timeout=30000');
    expect([encoded.timeoutMs, encoded.forwardQuery]).toEqual([5000, 'timeout=5000&wait=true&consumerGroup=a%20b']);
  });

  it.each([
    'timeout=-1&wait=true',
    'wait=true&timeout=1e309',
    'batch=0',
    'batch=101',
    'batch=abc',
    'wait=maybe',
    'wait=true&wait=false',
    'timeout=1&timeout=2',
    'partitions=0',
    'consumerGroup=a&consumerGroup=b',
  ])('refuses %s with invalid_request', (raw) => {
    const q = parsePopQuery(raw, 100, lp);
    expect(isEdgeError(q) && q.code).toBe('invalid_request');
  });
});
