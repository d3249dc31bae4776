/** The directory index changed in place: one tenant placed again gives what a full build of the same inputs gives. */
import { describe, expect, it } from 'vitest';
import type { RawPlan, RawTenant } from '../../src/config/schema.js';
import { buildSnapshot, changedTenants, noRecords, type TenantIndex, type FileDirectory, type RedisRecords } from '../../src/tenants/snapshot.js';

const PLAN: RawPlan = {
  features: [],
  limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 100,
};
const tenant = (hosts: string[], over: Partial<RawTenant> = {}): RawTenant => ({
  status: 'active',
  plan: 'free',
  hosts,
  brokers: ['http://127.0.0.1:1'],
  tenancyAwareBrokers: true,
  brokerVersion: '0.15.1',
  cors: { origins: [] },
  boundedLoadFactor: null,
  auth: null,
  ...over,
});

function fileOf(n: number): FileDirectory {
  const tenants: Record<string, RawTenant> = {};
  for (let i = 0; i < n; i++) tenants[`t${i}`] = tenant([`t${i}.example`]);
  return { plans: { free: PLAN }, tenants };
}

/** What a reader sees: tenants by id (status, plan, hosts), hosts, storage gate, rejections. */
function view(ix: TenantIndex): unknown {
  return {
    byId: [...ix.byId].map(([id, t]) => [id, t.status, t.plan.id, t.hosts.join(',')]).sort(),
    byHost: [...ix.byHost].map(([h, t]) => [h, t.id]).sort(),
    storage: [...ix.storage].sort(),
    blocked: [...ix.blocked].sort(),
    rejected: ix.rejected.map((r) => [r.kind, r.id, r.source, r.conflict, r.problems]).sort(),
  };
}

const fresh = (file: FileDirectory, records: RedisRecords): TenantIndex => buildSnapshot(file, records).snapshot;

describe('TenantIndex.place', () => {
  it('a record, a suspension, a storage update and a deletion each change that tenant alone, as a full build would', () => {
    const file = fileOf(50);
    const records = noRecords();
    const ix = fresh(file, records);
    const before = new Map(ix.byId);

    records.tenants.set('new', JSON.stringify(tenant(['new.example'])));
    expect(ix.place('new')).toBe(true);
    records.status.t3 = 'suspended';
    expect(ix.place('t3')).toBe(true);
    records.storage.t4 = '150';
    expect(ix.place('t4')).toBe(true);
    records.deleted.add('t5');
    expect(ix.place('t5')).toBe(true);
    records.tenants.set('t6', JSON.stringify(tenant(['moved.example'])));
    expect(ix.place('t6')).toBe(true);

    expect(view(ix)).toEqual(view(fresh(file, records)));
    expect(ix.byId.get('t3')?.status).toBe('suspended');
    expect(ix.blocked.has('t4')).toBe(true);
    expect(ix.byHost.has('t6.example')).toBe(false);
    expect(ix.byHost.get('moved.example')?.id).toBe('t6');
    // Every other tenant keeps its compiled object.
    expect(changedTenants({ ...ix, byId: before } as TenantIndex, ix)).toEqual(new Set(['new', 't3', 't5', 't6']));
  });

  it('a record taking a host the file gives another tenant is refused and its file version stays; freeing the host lets it in', () => {
    const file = fileOf(3);
    const records = noRecords();
    const ix = fresh(file, records);
    records.tenants.set('t1', JSON.stringify(tenant(['t0.example'])));
    expect(ix.place('t1')).toBe(true);
    expect(ix.byHost.get('t0.example')?.id).toBe('t0');
    expect(ix.byHost.get('t1.example')?.id).toBe('t1');
    expect(ix.rejectionsOf('tenant:t1')).toEqual([
      { kind: 'tenant', id: 't1', source: 'redis', conflict: true, problems: ['hosts: host "t0.example" is already listed by tenant "t0"'] },
    ]);
    expect(view(ix)).toEqual(view(fresh(file, records)));
    // t0 leaves: what t1's record wanted is free, which only a full build decides in order.
    records.deleted.add('t0');
    expect(ix.place('t0')).toBe(false);
    expect(view(fresh(file, records))).toMatchObject({ byHost: expect.arrayContaining([['t0.example', 't1']]) });
  });

  it('answers false, changing nothing, when the change outranks a tenant in force it clashes with', () => {
    const file = fileOf(2);
    const records = noRecords();
    records.tenants.set('zz', JSON.stringify(tenant(['shared.example'])));
    const ix = fresh(file, records);
    const seen = view(ix);
    // A lower id takes precedence among records: aa would push zz out.
    records.tenants.set('aa', JSON.stringify(tenant(['shared.example'])));
    expect(ix.place('aa')).toBe(false);
    expect(view(ix)).toEqual(seen);
    expect(fresh(file, records).byHost.get('shared.example')?.id).toBe('aa');
  });

  it('judges a write against the directory in force: a clash it would lose, and one that would displace', () => {
    const file = fileOf(2);
    const records = noRecords();
    records.tenants.set('mm', JSON.stringify(tenant(['held.example'])));
    const ix = fresh(file, records);
    expect(ix.judge('zz', tenant(['held.example']))).toEqual({ problems: ['hosts: host "held.example" is already listed by tenant "mm"'], conflict: true });
    expect(ix.judge('aa', tenant(['held.example']))).toEqual({
      problems: ['would displace tenant "mm": hosts: host "held.example" is already listed by tenant "aa"'],
      conflict: true,
    });
    expect(ix.judge('aa', tenant(['free.example'], { plan: 'gold' }))).toEqual({ problems: ['plan: unknown plan "gold"'], conflict: false });
    expect(ix.judge('aa', tenant(['free.example']))).toBeNull();
  });

  it('keeps the broker URLs in force counted, and which came or went since last told', () => {
    const file = fileOf(3);
    const records = noRecords();
    const ix = fresh(file, records);
    ix.brokerMoves.clear();
    records.tenants.set('x', JSON.stringify(tenant(['x.example'])));
    ix.place('x');
    expect([...ix.brokerMoves]).toEqual([]);
    records.tenants.set('y', JSON.stringify(tenant(['y.example'], { brokers: ['http://127.0.0.1:2/'], tenancyAwareBrokers: false })));
    ix.place('y');
    // Placed again (released, then admitted): the URL's state before the first crossing is what counts.
    ix.place('y');
    expect([...ix.brokerMoves]).toEqual([['http://127.0.0.1:2', false]]);
    expect([...ix.brokerUrls]).toEqual([
      ['http://127.0.0.1:1', 4],
      ['http://127.0.0.1:2', 1],
    ]);
    ix.brokerMoves.clear();
    records.deleted.add('y');
    ix.place('y');
    expect([...ix.brokerMoves]).toEqual([['http://127.0.0.1:2', true]]);
    expect(ix.brokerUrls.has('http://127.0.0.1:2')).toBe(false);
  });

  it('random changes to 100 tenants placed one at a time agree with a full build of the same inputs', () => {
    const file = fileOf(100);
    const records = noRecords();
    let ix = fresh(file, records);
    let placed = 0;
    let seed = 7;
    const rnd = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed % n;
    };
    for (let step = 0; step < 200; step++) {
      const id = `t${rnd(115)}`;
      switch (rnd(5)) {
        case 0:
          // Hosts drawn from a small pool, so records clash now and then.
          records.tenants.set(id, JSON.stringify(tenant([`h${rnd(150)}.example`])));
          records.deleted.delete(id);
          break;
        case 1:
          records.deleted.add(id);
          records.tenants.delete(id);
          break;
        case 2:
          records.status[id] = rnd(2) === 0 ? 'suspended' : 'active';
          break;
        case 3:
          records.storage[id] = String(rnd(200));
          break;
        default:
          records.tenants.delete(id);
          records.deleted.delete(id);
      }
      // On false the caller runs a full build, which lends the compiled tenants.
      if (ix.place(id)) placed++;
      else ix = buildSnapshot(file, records, ix).snapshot;
      expect(view(ix), `step ${step}, ${id}`).toEqual(view(fresh(file, records)));
    }
    // Most changes are placed alone.
    expect(placed).toBeGreaterThan(120);
  });
});

describe('shared parts', () => {
  it('tenants with the same CORS origins, brokers and no limit overrides share one policy, one broker list and their plan limits', () => {
    const file: FileDirectory = {
      plans: { free: PLAN },
      tenants: {
        a: tenant(['a.example'], { cors: { origins: ['https://x.example'] } }),
        b: tenant(['b.example'], { cors: { origins: ['https://x.example'] } }),
      },
    };
    const ix = fresh(file, noRecords());
    const [a, b] = [ix.byId.get('a')!, ix.byId.get('b')!];
    expect(a.cors).toBe(b.cors);
    expect(a.brokers).toBe(b.brokers);
    expect(a.limits).toBe(a.plan.limits);
  });
});
