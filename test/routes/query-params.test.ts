import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { declaredParams, QUERY_PARAMS, queryAllowProblems, readQuery, suffixClashes, type QueryFacts, type QueryRules } from '../../src/routes/query-params.js';
import { ROUTES } from '../../src/routes/table.js';
import { compileTables } from '../../src/tables.js';
import { testConfig } from '../helpers/edge.js';
import { brokerQueryParam } from '../helpers/broker-double.js';

const lp = { defaultTimeoutMs: 30000, maxTimeoutMs: 60000 };
const POP: QueryRules = { params: declaredParams('pop.queue'), longPoll: true, maxBatch: 100, longPollSettings: lp };

function read(raw: string, rules: QueryRules = POP): QueryFacts {
  const q = readQuery(raw, rules);
  if (isEdgeError(q)) throw new Error(`unexpected refusal: ${q.message}`);
  return q;
}

/** autoAck's value as read, and the forwarded query. */
function read_(raw: string): [string | undefined, string] {
  const q = read(raw);
  return [q.values.get('autoAck'), q.forward];
}

describe('readQuery', () => {
  it('rebuilds the query: shortest name first, values percent-encoded, a space as %20', () => {
    expect(read('consumerGroup=a+b&batch=10').forward).toBe('batch=10&consumerGroup=a%20b');
    expect(read('consumerGroup=x%3Dy%26wait%3Dtrue').forward).toBe('consumerGroup=x%3Dy%26wait%3Dtrue');
    expect(read('autoAck=true&subscriptionFrom=2025-01-01T00:00:00%2B01:00').forward).toBe('autoAck=true&subscriptionFrom=2025-01-01T00%3A00%3A00%2B01%3A00');
  });

  it('keeps a timeout under the maximum, caps one above it, and makes an absent one explicit', () => {
    expect([read('wait=true&timeout=5000').timeoutMs, read('wait=true&timeout=5000').forward]).toEqual([5000, 'wait=true&timeout=5000']);
    expect([read('wait=true&timeout=999999').timeoutMs, read('wait=true&timeout=999999').forward]).toEqual([60000, 'wait=true&timeout=60000']);
    expect([read('wait=true').timeoutMs, read('wait=true').forward]).toEqual([30000, 'wait=true&timeout=30000']);
    expect(read('t%69meout=5000&wait=true').forward).toBe('wait=true&timeout=5000');
  });

  it('forwards wait=false on a route that does not park', () => {
    const q = read('wait=true&timeout=600000&namespace=n', { ...POP, params: declaredParams('pop.namespace'), longPoll: false });
    expect([q.wait, q.forward]).toEqual([false, 'wait=false&timeout=600000&namespace=n']);
  });

  it.each([
    ['xwait=true', 'xwait'],
    ['await=true&wait=false', 'await'],
    ['xtimeout=600000', 'xtimeout'],
    ['xbatch=5000', 'xbatch'],
    ['wait=true&foo', 'foo'],
  ])('refuses the undeclared name in %s, naming it', (raw, name) => {
    const q = readQuery(raw, POP);
    expect(isEdgeError(q) && [q.code, q.message.includes(`"${name}"`)]).toEqual(['invalid_request', true]);
  });

  it.each([
    'timeout=-1&wait=true',
    'wait=true&timeout=1e309',
    'timeout=2147483648',
    'batch=0',
    'batch=101',
    'batch=abc',
    'batch=',
    'wait=true&wait=false',
    'wait=&wait=true',
    'wait&wait=1',
    'timeout=1&timeout=2',
    'partitions=0',
    'partitions=101',
    'consumerGroup=a&consumerGroup=b',
    'consumerGroup=%E0%A4%A',
    `consumerGroup=${'x'.repeat(1025)}`,
  ])('refuses %s with invalid_request', (raw) => {
    const q = readQuery(raw, POP);
    expect(isEdgeError(q) && q.code).toBe('invalid_request');
  });

  it.each([
    ['true', 'true'],
    ['1', 'true'],
    ['%31', 'true'],
    ['True', 'false'],
    ['TRUE', 'false'],
    ['0', 'false'],
    ['yes', 'false'],
    ['maybe', 'false'],
    ['false', 'false'],
  ])('reads autoAck=%s as the broker does (%s), and forwards that canonical value', (spelled, read) => {
    expect(read_(`autoAck=${spelled}`)).toEqual([read, `autoAck=${read}`]);
  });

  it('leaves an empty boolean out of what it forwards: the broker applies its default', () => {
    expect(read_('autoAck=')).toEqual([undefined, '']);
    expect(read_('autoAck')).toEqual([undefined, '']);
    expect([read('wait=&batch=2').wait, read('wait=&batch=2').forward]).toEqual([false, 'batch=2']);
  });

  it('parks a wait=1 pop like wait=true, its timeout capped', () => {
    const q = read('wait=1&timeout=600000');
    expect([q.wait, q.timeoutMs, q.forward]).toEqual([true, 60000, 'wait=true&timeout=60000']);
  });

  it('caps partitions at the plan maxBatch when it is the smaller, and limit on the list routes', () => {
    expect(isEdgeError(readQuery('partitions=6', { ...POP, maxBatch: 5 }))).toBe(true);
    expect(read('partitions=5', { ...POP, maxBatch: 5 }).forward).toBe('partitions=5');
    const messages: QueryRules = { ...POP, params: declaredParams('messages.read'), longPoll: false };
    expect(read('limit=1000&offset=0', messages).forward).toBe('limit=1000&offset=0');
    expect(isEdgeError(readQuery('limit=1001', messages))).toBe(true);
  });

  it('takes no parameters on a route that declares none, but the names an operator allows', () => {
    const none: QueryRules = { ...POP, params: declaredParams('push'), longPoll: false };
    expect(isEdgeError(readQuery('x=1', none))).toBe(true);
    expect(read('', none).forward).toBe('');
    expect(read('x=a%26b', { ...none, params: declaredParams('push', ['x']) }).forward).toBe('x=a%26b');
    // A name every object inherits is allowed like any other.
    expect(read('constructor=1', { ...none, params: declaredParams('push', ['constructor']) }).forward).toBe('constructor=1');
  });
});

/** Queries Queen's own clients send (clients/client-js, -py, -go, -cpp, the CLI's smoke test), by route. */
const CLIENT_QUERIES: ReadonlyArray<readonly [string, string]> = [
  ['pop.queue', 'batch=10&wait=true&timeout=30000&consumerGroup=billing&subscriptionMode=new&subscriptionFrom=now&namespace=n&task=t&partitions=4'],
  ['pop.queue', 'batch=1&wait=false&timeout=30000&consumerGroup=g+1&autoAck=true'],
  ['pop.partition', 'batch=10&wait=true&timeout=5000&consumerGroup=billing'],
  ['pop.namespace', 'batch=10&wait=true&timeout=30000&namespace=billing&task=resize&partitions=2'],
  ['consumer-groups.read', 'minLagSeconds=60'],
  ['consumer-groups.delete', 'deleteMetadata=true'],
  ['resources.read', 'namespace=n&task=t&limit=10&offset=20'],
  ['messages.read', 'queue=q&partition=p&status=pending&consumerGroup=g&limit=200&offset=0'],
  ['dlq.read', 'queue=q&limit=100&offset=0&consumerGroup=g&partition=p&from=2025-01-01T00%3A00%3A00Z&to=2025-01-02T00%3A00%3A00Z'],
  ['status.queues', 'includePartitions=true'],
  ['status.queues', 'includePartitions=True'],
  ['status.queues', 'includePartitions=1'],
  ['consumer-groups.delete', 'deleteMetadata=1'],
  ['pop.queue', 'autoAck=1&wait=1&timeout=60000'],
  ['status.queues', 'namespace=n&task=t'],
  ['status.analytics', 'from=2025-01-01T00:00:00Z&to=2025-01-02T00:00:00Z&interval=hour'],
  ['analytics.queue-lag', 'from=a&to=b'],
  ['traces.read', 'limit=50&offset=0'],
];

describe('the declarations', () => {
  it.each(CLIENT_QUERIES)("accept what Queen's clients send: %s ?%s", (route, raw) => {
    const q = readQuery(raw, {
      params: declaredParams(route),
      longPoll: route !== 'pop.namespace' && route.startsWith('pop.'),
      maxBatch: 1000,
      longPollSettings: lp,
    });
    expect(isEdgeError(q) ? q.message : 'accepted').toBe('accepted');
  });

  it('name only routes of the table, and no declared name ends another of its route', () => {
    const names = new Set(ROUTES.map((r) => r.name));
    expect(Object.keys(QUERY_PARAMS).filter((n) => !names.has(n))).toEqual([]);
    for (const params of Object.values(QUERY_PARAMS)) expect(suffixClashes(Object.keys(params))).toEqual([]);
  });

  it('queryAllow problems refuse the config at load time', () => {
    expect(() => compileTables(testConfig(['http://127.0.0.1:1'], { queryAllow: { 'pop.queue': ['xwait'] } }))).toThrow(/xwait/);
    expect(compileTables(testConfig(['http://127.0.0.1:1'], { queryAllow: { 'resources.read': ['debug'] } })).routes.length).toBeGreaterThan(0);
  });

  it('queryAllow: unknown routes and names clashing with the broker search are config problems', () => {
    const names = new Set(ROUTES.map((r) => r.name));
    expect(queryAllowProblems({ 'pop.queue': ['xwait'], nope: ['a'], push: ['trace'] }, names)).toEqual([
      'queryAllow.pop.queue: "wait" ends "xwait"',
      'queryAllow.nope: no such route',
    ]);
  });
});

/** A query a client might send to a route: its names, near misses of them, arbitrary text, encoded or raw. */
function queryArb(names: readonly string[]): fc.Arbitrary<string> {
  const nameArb = fc.oneof(
    { arbitrary: fc.constantFrom(...names), weight: 6 },
    { arbitrary: fc.constantFrom(...names).map((n) => `x${n}`), weight: 1 },
    { arbitrary: fc.constantFrom(...names).map((n) => `${n[0]}%${n.charCodeAt(1).toString(16)}${n.slice(2)}`), weight: 1 },
    { arbitrary: fc.string({ maxLength: 6 }), weight: 1 },
  );
  const valueArb = fc.oneof(
    fc.constantFrom('true', 'false', '1', '0', '5', '600000', '', 'True', 'TRUE', 'yes', '%31', '+1'),
    fc.nat({ max: 2 ** 31 }).map(String),
    fc.string({ maxLength: 12 }),
    fc.string({ unit: 'grapheme', maxLength: 12 }).map(encodeURIComponent),
    fc.constantFrom('a=b', 'wait=true', 'x&timeout=9', '%2', '+', 'a+b', '%26batch%3D9', '%2Bx%3D'),
  );
  return fc.array(fc.tuple(nameArb, valueArb), { maxLength: 6 }).map((pairs) => pairs.map(([n, v]) => `${n}=${v}`).join('&'));
}

describe('one reading (property)', () => {
  it.each(Object.keys(QUERY_PARAMS))('%s: for any query the edge accepts, the broker reads every declared name as the edge did', (route) => {
    const rules: QueryRules = {
      params: declaredParams(route),
      longPoll: route.startsWith('pop.') && route !== 'pop.namespace',
      maxBatch: 1000,
      longPollSettings: lp,
    };
    fc.assert(
      fc.property(queryArb(Object.keys(rules.params)), (raw) => {
        const q = readQuery(raw, rules);
        if (isEdgeError(q)) return;
        for (const name of Object.keys(rules.params)) expect(brokerQueryParam(q.forward, name)).toBe(q.values.get(name) ?? null);
      }),
      { numRuns: 400 },
    );
  });
});

/** The broker's `get_query_param_bool` on the value a client sent (decoded): null when absent or empty (its default). */
function brokerBool(decoded: string | undefined): boolean | null {
  return decoded === undefined || decoded === '' ? null : decoded === 'true' || decoded === '1';
}

describe('one reading of booleans (property)', () => {
  const boolRoutes = Object.entries(QUERY_PARAMS).flatMap(([r, params]) => (Object.values(params).includes('bool') ? [r] : []));

  it.each(boolRoutes)('%s: every spelling of a boolean the edge accepts reaches the broker as the broker would have read it', (route) => {
    const rules: QueryRules = {
      params: declaredParams(route),
      longPoll: route.startsWith('pop.') && route !== 'pop.namespace',
      maxBatch: 1000,
      longPollSettings: lp,
    };
    const bools = Object.keys(rules.params).filter((n) => rules.params[n] === 'bool');
    const spelling = fc.constantFrom('true', 'false', 'True', 'TRUE', 'FALSE', '1', '0', 'yes', 'no', '', '%31', '%74rue', '+', 'on');
    fc.assert(
      fc.property(fc.subarray(bools), fc.array(spelling, { minLength: bools.length, maxLength: bools.length }), (names, values) => {
        const raw = names.map((n, i) => `${n}=${values[i]}`).join('&');
        const q = readQuery(raw, rules);
        if (isEdgeError(q)) throw new Error(`refused ${raw}: ${q.message}`);
        for (const [i, name] of names.entries()) {
          const spelled = values[i] ?? '';
          const client = brokerBool(decodeURIComponent(spelled.replace(/\+/g, ' ')));
          const forwarded = brokerQueryParam(q.forward, name);
          const atBroker = forwarded === null ? null : brokerBool(forwarded);
          // A route that does not park forwards wait=false whatever was asked.
          const expected = name === 'wait' && !rules.longPoll && client !== null ? false : client;
          expect([name, spelled, atBroker]).toEqual([name, spelled, expected]);
        }
      }),
      { numRuns: 300 },
    );
  });
});
