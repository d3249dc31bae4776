/** Counting rules and bucket arithmetic of metering (pure). */
import { describe, expect, it } from 'vitest';
import { HOUR_MS, UsageCounts, bucketStart, countExchange, hourFields, parseDayHash, rollUp } from '../../src/metering/counts.js';
import type { AnswerFacts } from '../../src/metering/answer-scan.js';
import type { Exchange } from '../../src/metering/recorder.js';
import { ROUTES } from '../../src/routes/table.js';

const route = (name: string) => ROUTES.find((r) => r.name === name)!;
const facts = (f: Partial<AnswerFacts>): AnswerFacts => ({ pushed: 0, acked: 0, delivered: 0, committed: false, leaseId: null, ...f });
const x = (name: string, status: number, response: AnswerFacts | null, extra: Partial<Exchange> = {}): Exchange => ({
  tenantId: 't',
  route: route(name),
  status,
  code: null,
  bytesIn: 10,
  bytesOut: 20,
  requestMessages: 0,
  requestAcks: 0,
  autoAck: false,
  response,
  answerLost: false,
  ...extra,
});

describe('countExchange', () => {
  it.each([
    [
      'push: the accepted items of the answer',
      x('push', 201, facts({ pushed: 3, acked: 1, delivered: 9 })),
      { messagesPushed: 3, acks: 0, messagesDelivered: 0 },
    ],
    ['push: an unread answer (cut, not JSON) counts nothing', x('push', 201, null, { requestMessages: 5 }), { messagesPushed: 0 }],
    ['pop: messages of a 200', x('pop.queue', 200, facts({ delivered: 3 })), { messagesDelivered: 3, acks: 0 }],
    ['pop with autoAck: its messages are acks too', x('pop.queue', 200, facts({ delivered: 3 }), { autoAck: true }), { messagesDelivered: 3, acks: 3 }],
    ['pop: a 204 delivers nothing', x('pop.queue', 204, null), { messagesDelivered: 0 }],
    ['ack: only success true', x('ack.batch', 200, facts({ acked: 2 })), { acks: 2 }],
    [
      'transaction: request items and acks when 2xx and committed',
      x('transaction', 200, facts({ committed: true }), { requestMessages: 7, requestAcks: 2 }),
      { messagesPushed: 7, acks: 2 },
    ],
    [
      'transaction: nothing when the broker rolled it back (200 success false)',
      x('transaction', 200, facts({ committed: false, acked: 1 }), { requestMessages: 7, requestAcks: 2 }),
      { messagesPushed: 0, acks: 0 },
    ],
    ['transaction: nothing when refused', x('transaction', 409, null, { requestMessages: 7, requestAcks: 2 }), { messagesPushed: 0, acks: 0 }],
    ['push: the request items when the client left before any answer', x('push', 0, null, { requestMessages: 5, answerLost: true }), { messagesPushed: 5 }],
    [
      'transaction: the request items and acks when the client left before any answer',
      x('transaction', 0, null, { requestMessages: 3, requestAcks: 2, answerLost: true }),
      { messagesPushed: 3, acks: 2 },
    ],
    ['ack: the request acks when the client left before any answer', x('ack.batch', 0, null, { requestAcks: 4, answerLost: true }), { acks: 4 }],
    ['a refusal by code', x('push', 429, null, { code: 'rate_limited' }), { refusals: { rate_limited: 1 } }],
  ])('%s', (_name, exchange, expected) => {
    const c = new UsageCounts();
    countExchange(c, exchange);
    expect(c).toMatchObject({ requests: 1, ingressBytes: 10, egressBytes: 20, ...expected });
  });
});

describe('day hashes and buckets', () => {
  it('hourFields and parseDayHash round-trip, zeros left out', () => {
    const c = new UsageCounts();
    countExchange(c, x('push', 201, facts({ pushed: 1 }), { code: null }));
    c.refusals.quota_exceeded = 2;
    const fields = hourFields(7, c);
    expect(fields).toContainEqual(['07:req', 1]);
    expect(fields.some(([f]) => f === '07:pop')).toBe(false);
    const day = Date.UTC(2026, 11, 3);
    const back = parseDayHash(day, Object.fromEntries(fields.map(([f, n]) => [f, String(n)])));
    expect([...back.keys()]).toEqual([day + 7 * HOUR_MS]);
    expect(back.get(day + 7 * HOUR_MS)).toEqual(c);
  });

  it('bucketStart and rollUp group hours by UTC day and month', () => {
    const h = Date.UTC(2026, 11, 31, 23, 30);
    expect(bucketStart(h, 'hour')).toBe(Date.UTC(2026, 11, 31, 23));
    expect(bucketStart(h, 'day')).toBe(Date.UTC(2026, 11, 31));
    expect(bucketStart(h, 'month')).toBe(Date.UTC(2026, 11, 1));
    const one = () => Object.assign(new UsageCounts(), { requests: 1 });
    const hours = new Map([
      [Date.UTC(2027, 0, 1, 1), one()],
      [Date.UTC(2026, 11, 31, 22), one()],
      [Date.UTC(2026, 11, 31, 23), one()],
    ]);
    expect(rollUp(hours, 'day').map((b) => [new Date(b.start).toISOString().slice(0, 10), b.counts.requests])).toEqual([
      ['2026-12-31', 2],
      ['2027-01-01', 1],
    ]);
    expect(rollUp(hours, 'month').map((b) => b.counts.requests)).toEqual([2, 1]);
  });
});
