/** The tenant directory's one build: every validation rule, pure (no Redis). */
import { describe, expect, it } from 'vitest';
import type { RawPlan, RawTenant } from '../../src/config/schema.js';
import { buildSnapshot, NO_RECORDS, snapshotChanged, type FileDirectory, type RedisRecords } from '../../src/tenants/snapshot.js';

const PLAN: RawPlan = {
  features: [],
  limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 0,
};
// One broker for every tenant here, declared tenancy-aware: these tests are about the other rules.
const tenant = (hosts: string[], plan = 'free', brokers = ['http://127.0.0.1:1']): RawTenant => ({
  status: 'active',
  plan,
  hosts,
  brokers,
  tenancyAwareBrokers: true,
  brokerVersion: '0.15.1',
  cors: { origins: [] },
  boundedLoadFactor: null,
  auth: null,
});
const FILE: FileDirectory = { plans: { free: PLAN }, tenants: { a: tenant(['a.example']), b: tenant(['b.example']) } };

function records(tenants: Record<string, unknown>, extra: Partial<RedisRecords> = {}): RedisRecords {
  return { ...NO_RECORDS, tenants: new Map(Object.entries(tenants).map(([id, r]) => [id, typeof r === 'string' ? r : JSON.stringify(r)])), ...extra };
}

describe('buildSnapshot', () => {
  it('the file alone: tenants by id and by lower-cased host, records in force', () => {
    const { snapshot, rejected } = buildSnapshot({ ...FILE, tenants: { ...FILE.tenants, c: tenant(['C.Example']) } }, NO_RECORDS);
    expect(rejected).toEqual([]);
    expect(snapshot.byHost.get('c.example')?.id).toBe('c');
    expect(snapshot.records.get('a')).toBe(FILE.tenants.a);
  });

  it('lists a host written with the trailing dot of an FQDN under the name requests use, and sees it as the same host', () => {
    const { snapshot, rejected } = buildSnapshot({ ...FILE, tenants: { ...FILE.tenants, c: tenant(['C.Example.']), d: tenant(['c.example']) } }, NO_RECORDS);
    expect(snapshot.byHost.get('c.example')?.id).toBe('c');
    expect(rejected.map((r) => [r.id, r.problems])).toEqual([['d', ['tenants.d.hosts: host "c.example" is already listed by tenant "c"']]]);
  });

  it('refuses file tenants with a bad id, an unknown plan, or a host another lists', () => {
    const { snapshot, rejected } = buildSnapshot(
      { plans: { free: PLAN, 'bad{id}': PLAN }, tenants: { ...FILE.tenants, 'x{y}': tenant([]), c: tenant([], 'gold'), d: tenant(['A.example']) } },
      NO_RECORDS,
    );
    expect(rejected.map((r) => [r.kind, r.id, r.source, r.conflict])).toEqual([
      ['plan', 'bad{id}', 'file', false],
      ['tenant', 'x{y}', 'file', false],
      ['tenant', 'c', 'file', false],
      ['tenant', 'd', 'file', true],
    ]);
    expect(rejected[3]!.problems).toEqual(['tenants.d.hosts: host "a.example" is already listed by tenant "a"']);
    expect([...snapshot.byId.keys()]).toEqual(['a', 'b']);
  });

  it('refuses a tenant whose id differs from another only in case: the file over records, the lower id among records', () => {
    const file = buildSnapshot({ ...FILE, tenants: { ...FILE.tenants, A: tenant(['big-a.example']) } }, NO_RECORDS);
    expect(file.rejected.map((r) => [r.id, r.conflict, r.problems])).toEqual([
      ['A', true, ['tenants.A.id: tenant "A" differs from tenant "a" only in case (tenant ids are unique regardless of case)']],
    ]);
    const { snapshot, rejected } = buildSnapshot(FILE, records({ Zed: tenant(['z1.example']), zed: tenant(['z2.example']) }));
    expect(rejected.map((r) => [r.id, r.source])).toEqual([['zed', 'redis']]);
    expect([...snapshot.byId.keys()].sort()).toEqual(['Zed', 'a', 'b']);
  });

  it('a record taking a host the file gives another tenant is rejected; the file version stays', () => {
    const { snapshot, rejected } = buildSnapshot(FILE, records({ b: tenant(['a.example']) }));
    expect(rejected).toEqual([
      { kind: 'tenant', id: 'b', source: 'redis', conflict: true, problems: ['hosts: host "a.example" is already listed by tenant "a"'] },
    ]);
    expect(snapshot.byHost.get('a.example')?.id).toBe('a');
    expect(snapshot.byHost.get('b.example')?.id).toBe('b');
  });

  it('between two records the lower id keeps the host; a tenant deleted or moved frees it', () => {
    const both = buildSnapshot(FILE, records({ y: tenant(['shared.example']), x: tenant(['shared.example']) }));
    expect(both.snapshot.byHost.get('shared.example')?.id).toBe('x');
    expect(both.snapshot.byId.has('y')).toBe(false);
    expect(both.rejected.map((r) => r.id)).toEqual(['y']);
    const moved = buildSnapshot(FILE, records({ a: tenant(['new-a.example']), c: tenant(['a.example']) }));
    expect(moved.rejected).toEqual([]);
    expect(moved.snapshot.byHost.get('a.example')?.id).toBe('c');
    const deleted = buildSnapshot(FILE, records({ c: tenant(['a.example']) }, { deleted: new Set(['a']) }));
    expect(deleted.snapshot.byHost.get('a.example')?.id).toBe('c');
  });

  it('records with bad JSON, a bad shape or an unknown plan are rejected; plan records add plans', () => {
    const { snapshot, rejected } = buildSnapshot(
      FILE,
      records({ a: 'not json', b: { plan: 'free' }, c: tenant([], 'gold'), d: tenant([], 'pro') }, { plans: new Map([['pro', JSON.stringify(PLAN)]]) }),
    );
    expect(rejected.map((r) => r.id)).toEqual(['a', 'b', 'c']);
    expect(rejected[2]!.problems).toEqual(['plan: unknown plan "gold"']);
    expect(snapshot.records.get('a')).toBe(FILE.tenants.a);
    expect(snapshot.byId.get('d')?.plan.id).toBe('pro');
  });

  it('keeps compiled objects of unchanged tenants, and reports whether anything changed', () => {
    const first = buildSnapshot(FILE, NO_RECORDS).snapshot;
    const same = buildSnapshot(FILE, NO_RECORDS, first).snapshot;
    expect(same.byId.get('a')).toBe(first.byId.get('a'));
    expect(snapshotChanged(first, same)).toBe(false);
    const suspended = buildSnapshot(FILE, records({}, { status: { a: 'suspended' } }), first).snapshot;
    expect(suspended.byId.get('a')?.status).toBe('suspended');
    expect(suspended.byId.get('b')).toBe(first.byId.get('b'));
    expect(snapshotChanged(first, suspended)).toBe(true);
    expect(snapshotChanged(first, buildSnapshot(FILE, records({}, { storage: { a: '5' } }), first).snapshot)).toBe(true);
  });
});
