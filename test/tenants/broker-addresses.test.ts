/** BrokerAddresses: broker host names resolved off the request path, bounded in time, read synchronously by the directory. */
import { describe, expect, it } from 'vitest';
import type { RawTenant } from '../../src/config/schema.js';
import { BrokerAddresses, brokerUrlsOf } from '../../src/tenants/broker-addresses.js';
import { buildSnapshot, NO_RECORDS } from '../../src/tenants/snapshot.js';

const table =
  (answers: Record<string, readonly string[]>, calls: string[] = []) =>
  (host: string) => {
    calls.push(host);
    const a = answers[host];
    return a ? Promise.resolve(a) : Promise.reject(new Error(`ENOTFOUND ${host}`));
  };

describe('BrokerAddresses', () => {
  it('identifies a named broker by its spelling and by each address its name resolved to; addresses and loopback names are not looked up', async () => {
    const calls: string[] = [];
    const book = new BrokerAddresses({ lookup: table({ 'queen-a': ['10.0.0.5', '::ffff:10.0.0.6', '2001:db8::1'], 'queen-lo': ['127.0.1.1'] }, calls) });
    expect(book.identitiesOf('http://queen-a:6632')).toEqual(['queen-a:6632']);
    await book.learn(['http://Queen-A.:6632/x', 'http://queen-lo', 'http://10.0.0.7:1', 'http://[::1]:2', 'http://localhost:3', 'not a url']);
    expect(calls.sort()).toEqual(['queen-a', 'queen-lo']);
    expect(book.identitiesOf('http://user:pw@QUEEN-A:6632')).toEqual(['queen-a:6632', '10.0.0.5:6632', '10.0.0.6:6632', '[2001:db8::1]:6632']);
    expect(book.identitiesOf('https://queen-a')).toEqual(['queen-a:443', '10.0.0.5:443', '10.0.0.6:443', '[2001:db8::1]:443']);
    expect(book.identitiesOf('http://queen-lo')).toEqual(['queen-lo:80', 'loopback:80']);
    expect(book.identitiesOf('http://10.0.0.7:1')).toEqual(['10.0.0.7:1']);
  });

  it('returns within its time bound when the resolver hangs; a late answer fills the table for the next build', async () => {
    let answer: (a: string[]) => void = () => {};
    const book = new BrokerAddresses({ timeoutMs: 50, lookup: () => new Promise((resolve) => (answer = resolve)) });
    const started = Date.now();
    await book.learn(['http://slow:1']);
    expect(Date.now() - started).toBeLessThan(2000);
    expect(book.identitiesOf('http://slow:1')).toEqual(['slow:1']);
    answer(['10.1.1.1']);
    await new Promise((r) => setImmediate(r));
    expect(book.identitiesOf('http://slow:1')).toEqual(['slow:1', '10.1.1.1:1']);
  });

  it('looks a name up again after the TTL, keeps its addresses when that fails, and runs at most two lookups at once', async () => {
    let now = 0;
    let answers: Record<string, readonly string[]> = { a: ['10.0.0.1'] };
    const calls: string[] = [];
    const book = new BrokerAddresses({ ttlMs: 1000, clock: () => now, lookup: (h) => table(answers, calls)(h) });
    await book.learn(['http://a']);
    await book.learn(['http://a']);
    expect(calls).toEqual(['a']);
    now = 1000;
    answers = {};
    await book.learn(['http://a']);
    expect(calls).toEqual(['a', 'a']);
    expect(book.identitiesOf('http://a')).toEqual(['a:80', '10.0.0.1:80']);

    let running = 0;
    let most = 0;
    const busy = new BrokerAddresses({
      lookup: async () => {
        most = Math.max(most, ++running);
        await new Promise((r) => setTimeout(r, 5));
        running--;
        return ['10.9.9.9'];
      },
    });
    await busy.learn(Array.from({ length: 8 }, (_, i) => `http://n${i}`));
    expect(most).toBe(2);
    expect(busy.identitiesOf('http://n7')).toEqual(['n7:80', '10.9.9.9:80']);
  });

  it('brokerUrlsOf reads file entries and record texts, skipping what is not a tenant', () => {
    expect(brokerUrlsOf([{ brokers: ['http://a'] }, JSON.stringify({ brokers: ['http://b', 3] }), '{bad', null, { brokers: 'x' }])).toEqual([
      'http://a',
      'http://b',
    ]);
  });

  it('the directory refuses two tenants whose broker names resolve to one address, unless both declare it tenancy-aware', async () => {
    const book = new BrokerAddresses({ lookup: table({ 'queen-a': ['10.0.0.5'] }) });
    const t = (broker: string, tenancyAwareBrokers = false): RawTenant => ({
      status: 'active',
      plan: 'free',
      hosts: [],
      brokers: [broker],
      tenancyAwareBrokers,
      brokerVersion: '0.15.1',
      cors: { origins: [] },
      boundedLoadFactor: null,
      auth: null,
    });
    const plans = { free: { features: [], limits: {} as never, quotas: {} as never, storageBytes: 0 } } as never;
    await book.learn(['http://queen-a:6632']);
    const refused = buildSnapshot({ plans, tenants: { a: t('http://10.0.0.5:6632'), b: t('http://queen-a:6632') } }, NO_RECORDS, undefined, book.identitiesOf);
    expect(refused.rejected.map((r) => r.problems[0])).toEqual([
      expect.stringContaining(
        'tenants.b.brokers: tenant "b" and tenant "a" both list broker "http://queen-a:6632" (host and port queen-a:6632, address 10.0.0.5:6632)',
      ),
    ]);
    const declared = buildSnapshot(
      { plans, tenants: { a: t('http://10.0.0.5:6632', true), b: t('http://queen-a:6632', true) } },
      NO_RECORDS,
      undefined,
      book.identitiesOf,
    );
    expect(declared.rejected).toEqual([]);
  });
});
