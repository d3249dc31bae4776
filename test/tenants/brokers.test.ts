/** Which broker URLs name one broker, and the directory's rule that a broker serves one tenant unless declared tenancy-aware. */
import { describe, expect, it } from 'vitest';
import type { RawPlan, RawTenant } from '../../src/config/schema.js';
import { brokerIdentity } from '../../src/tenants/brokers.js';
import { buildSnapshot, NO_RECORDS } from '../../src/tenants/snapshot.js';

describe('brokerIdentity', () => {
  it('one identity for every spelling of one host and port', () => {
    const same = [
      'http://127.0.0.1:6632',
      'http://localhost:6632/',
      'HTTP://LOCALHOST:6632//',
      'http://[::1]:6632',
      'http://2130706433:6632',
      'http://0x7f.1:6632',
      'http://127.0.0.2:6632',
      'http://0.0.0.0:6632',
      'http://[::ffff:127.0.0.1]:6632',
      'http://user:pw@localhost:6632/base',
    ];
    expect(new Set(same.map(brokerIdentity))).toEqual(new Set(['loopback:6632']));
    expect(brokerIdentity('http://Queen.Internal.')).toBe(brokerIdentity('http://queen.internal:80/'));
    expect(brokerIdentity('https://queen.internal')).toBe('queen.internal:443');
    expect(brokerIdentity('http://queen.internal:443')).toBe('queen.internal:443');
  });

  it('an IPv4-mapped IPv6 address is the IPv4 broker it reaches', () => {
    const same = [
      'http://10.0.0.5:6632',
      'http://[::ffff:10.0.0.5]:6632',
      'http://[::ffff:a00:5]:6632',
      'http://[0:0:0:0:0:ffff:a00:5]:6632',
      'http://167772165:6632',
    ];
    expect(new Set(same.map(brokerIdentity))).toEqual(new Set(['10.0.0.5:6632']));
    expect(brokerIdentity('http://[::ffff:10.0.0.6]:6632')).not.toBe(brokerIdentity('http://10.0.0.5:6632'));
  });

  it('different hosts or ports stay apart', () => {
    expect(brokerIdentity('http://127.0.0.1:6632')).not.toBe(brokerIdentity('http://127.0.0.1:6633'));
    expect(brokerIdentity('http://10.0.0.1:6632')).not.toBe(brokerIdentity('http://10.0.0.2:6632'));
    expect(brokerIdentity('http://queen-a.internal')).not.toBe(brokerIdentity('https://queen-a.internal'));
  });
});

const PLAN: RawPlan = {
  features: [],
  limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 0,
};
const tenant = (brokers: string[], tenancyAwareBrokers = false): RawTenant => ({
  status: 'active',
  plan: 'p',
  hosts: [],
  brokers,
  tenancyAwareBrokers,
  brokerVersion: '0.15.1',
  cors: { origins: [] },
  boundedLoadFactor: null,
  auth: null,
});
const build = (tenants: Record<string, RawTenant>) => buildSnapshot({ plans: { p: PLAN }, tenants }, NO_RECORDS);

describe('shared brokers in the directory', () => {
  it('two tenants on one broker: the second is refused, naming both and what to do', () => {
    const { snapshot, rejected } = build({ a: tenant(['http://127.0.0.1:6632']), b: tenant(['http://10.0.0.9:1', 'http://localhost:6632/']) });
    expect([...snapshot.byId.keys()]).toEqual(['a']);
    expect(rejected).toEqual([
      {
        kind: 'tenant',
        id: 'b',
        source: 'file',
        conflict: true,
        problems: [
          'tenants.b.brokers: tenant "b" and tenant "a" both list broker "http://localhost:6632/" (host and port loopback:6632) and would read each other\'s queues: ' +
            'give each tenant its own brokers, or, for a broker that scopes data by x-queen-tenant, set tenancyAwareBrokers: true on tenant "b" and tenant "a" (docs/tenancy.md)',
        ],
      },
    ]);
  });

  it('declared on one side only: still refused, naming the tenant that did not declare it', () => {
    const { rejected } = build({ a: tenant(['http://q:6632']), b: tenant(['http://q:6632'], true) });
    expect(rejected.map((r) => r.problems[0])).toEqual([expect.stringContaining('set tenancyAwareBrokers: true on tenant "a" (docs/tenancy.md)')]);
  });

  it('declared by every tenant on it: shared, and the compiled tenants say so', () => {
    const { snapshot, rejected } = build({ a: tenant(['http://q:6632'], true), b: tenant(['http://q:6632'], true), c: tenant(['http://r:6632']) });
    expect(rejected).toEqual([]);
    expect([...snapshot.byId.values()].map((t) => [t.id, t.tenancyAwareBrokers])).toEqual([
      ['a', true],
      ['b', true],
      ['c', false],
    ]);
  });

  it('one tenant may list a broker twice, in two spellings', () => {
    expect(build({ a: tenant(['http://127.0.0.1:6632', 'http://localhost:6632']) }).rejected).toEqual([]);
  });
});
