import { describe, expect, it } from 'vitest';
import { popNamespaceLaneKey, popQueueLaneKey, pushLaneKey } from '../../src/upstream/lane-key.js';

const q = (s: string) => new URLSearchParams(s);

describe('popQueueLaneKey', () => {
  it.each([
    ['orders', undefined, '', 'orders:*:__QUEUE_MODE__'],
    ['orders', undefined, 'consumerGroup=billing&batch=10', 'orders:*:billing'],
    ['orders', 'acct-42', 'consumerGroup=billing', 'orders:acct-42:billing'],
    ['orders', 'acct-42', 'wait=true', 'orders:acct-42:__QUEUE_MODE__'],
    ['orders', 'acct-42', 'consumerGroup=', 'orders:acct-42:__QUEUE_MODE__'],
    ['orders', '', 'consumerGroup=g', 'orders:*:g'],
    ['orders', 'a b', 'consumerGroup=g%2Fh', 'orders:a b:g/h'],
  ])('(%j, %j, %j) is %j', (queue, partition, query, expected) => {
    expect(popQueueLaneKey(queue, partition, q(query))).toBe(expected);
  });
});

describe('popNamespaceLaneKey', () => {
  it.each([
    ['namespace=billing&task=invoice&consumerGroup=g1', 'billing:invoice:g1'],
    ['namespace=billing', 'billing:*:*'],
    ['task=invoice&consumerGroup=g1', '*:invoice:g1'],
    ['namespace=&task=invoice', '*:invoice:*'],
    ['', '*:*:*'],
  ])('%j is %j', (query, expected) => {
    expect(popNamespaceLaneKey(q(query))).toBe(expected);
  });
});

describe('pushLaneKey', () => {
  it.each([
    [{ queue: 'orders', partition: 'acct-42', payload: {} }, 'orders:acct-42'],
    [{ queue: 'orders', payload: {} }, 'orders:Default'],
    [{ queue: 'orders', partition: null, payload: {} }, 'orders:Default'],
    [{ queue: 'orders', partition: '', payload: {} }, 'orders:'],
    [{ queue: 'orders', partition: 42, payload: {} }, null],
    [{ queue: '', payload: {} }, null],
    [{ queue: 7, payload: {} }, null],
    [{ payload: {} }, null],
    [['orders'], null],
    [null, null],
    [undefined, null],
    ['orders', null],
  ])('%j is %j', (item, expected) => {
    expect(pushLaneKey(item)).toBe(expected);
  });
});
