/**
 * The query strings Queen's own clients build, sent through a real edge: each is accepted and
 * forwarded so that the broker reads every boolean as it would have read the client's spelling
 * (`true` and `1` true, any other value false, empty the broker's default), and a long poll spelled
 * `wait=1` is a long poll to the edge too (a parked-poll slot, the capped timeout).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { brokerQueryParam, startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, TEST_PLAN, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';

const MAX_TIMEOUT_MS = 1500;

/** [client and call, path with the query it sends, each boolean name with what broker 0.15.1 reads of the client's spelling]. */
const CLIENT_CALLS: ReadonlyArray<readonly [string, string, Readonly<Record<string, boolean>>]> = [
  [
    'JS QueueBuilder.pop (URLSearchParams)',
    '/api/v1/pop/queue/q?batch=1&wait=false&timeout=30000&consumerGroup=g&autoAck=true',
    { wait: false, autoAck: true },
  ],
  ['JS ConsumerManager (URLSearchParams)', '/api/v1/pop/queue/q?batch=10&wait=false&timeout=30000&consumerGroup=billing&partitions=4', { wait: false }],
  ['Python Admin.get_queue_detail(includePartitions=True) (urlencode)', '/api/v1/status/queues/q?includePartitions=True', { includePartitions: false }],
  ['Python pop (str(wait).lower())', '/api/v1/pop/queue/q?batch=1&wait=false&timeout=30000&consumerGroup=g', { wait: false }],
  ['Go Admin.GetQueueDetail(name, true)', '/api/v1/status/queues/q?includePartitions=true', { includePartitions: true }],
  [
    'Go QueueBuilder.Pop (strconv.FormatBool)',
    '/api/v1/pop/queue/q?autoAck=false&batch=5&consumerGroup=g&timeout=30000&wait=false',
    { wait: false, autoAck: false },
  ],
  ['PHP Admin::getQueueDetail(["includePartitions" => true]) (http_build_query)', '/api/v1/status/queues/q?includePartitions=1', { includePartitions: true }],
  ['PHP Admin::deleteConsumerGroupForQueue (deleteMetadata)', '/api/v1/consumer-groups/g/queues/q?deleteMetadata=false', { deleteMetadata: false }],
  ['curl autoAck=1', '/api/v1/pop/queue/q?autoAck=1&consumerGroup=g', { autoAck: true }],
  ['curl deleteMetadata=1', '/api/v1/consumer-groups/g?deleteMetadata=1', { deleteMetadata: true }],
  ['curl deleteMetadata=TRUE', '/api/v1/consumer-groups/g?deleteMetadata=TRUE', { deleteMetadata: false }],
];

/** Broker 0.15.1's defaults where the parameter is absent or empty. */
const BROKER_DEFAULT: Readonly<Record<string, boolean>> = { wait: false, autoAck: false, deleteMetadata: true, includePartitions: false };

/** What the broker reads of a boolean in a raw query it receives (`get_query_param_bool`). */
function brokerBool(rawQuery: string, name: string): boolean {
  const v = brokerQueryParam(rawQuery, name);
  return v === null || v === '' ? (BROKER_DEFAULT[name] ?? false) : v === 'true' || v === '1';
}

function queryOf(url: string): string {
  return url.slice(url.indexOf('?') + 1);
}

describe("Queen's clients' queries through the edge", () => {
  let broker: BrokerDouble;
  let edge: EdgeHarness;
  let admin: string;

  beforeAll(async () => {
    broker = await startBrokerDouble({ pushStatus: 200 });
    const plans = { test: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, parkedPolls: 1 } } };
    edge = await startEdge(testConfig([broker.url], { plans, server: { longPoll: { defaultTimeoutMs: 1000, maxTimeoutMs: MAX_TIMEOUT_MS, slackMs: 1000 } } }));
    admin = await token({ roles: ['admin', 'read-write'], tenant: 'acme' });
  });
  afterAll(async () => {
    await edge?.close();
    await broker?.close();
  });

  it.each(CLIENT_CALLS)('%s: accepted, and the broker reads each boolean as it would have read the client', async (_client, path, expected) => {
    const before = forwarded(broker).length;
    const method = path.startsWith('/api/v1/consumer-groups') ? 'DELETE' : 'GET';
    const r = await call(edge, method, path, { token: admin });
    expect([r.status, r.json]).not.toEqual([400, expect.anything()]);
    const sent = forwarded(broker).slice(before);
    expect(sent).toHaveLength(1);
    const raw = queryOf(sent[0]!.url);
    const read = Object.fromEntries(Object.keys(expected).map((name) => [name, brokerBool(raw, name)]));
    expect(read).toEqual(expected);
  });

  it('an empty boolean is left to the broker, which applies its default', async () => {
    const before = forwarded(broker).length;
    const r = await call(edge, 'DELETE', '/api/v1/consumer-groups/g?deleteMetadata=', { token: admin });
    expect(r.status).not.toBe(400);
    const [sent] = forwarded(broker).slice(before);
    expect(sent?.url).not.toContain('deleteMetadata');
    expect(brokerBool('', 'deleteMetadata')).toBe(true);
  });

  it('wait=1 is a long poll to the edge: a parked-poll slot, and its timeout capped', async () => {
    const before = forwarded(broker).length;
    const rw = await token({ roles: ['read-write'], tenant: 'acme' });
    const parked = call(edge, 'GET', '/api/v1/pop/queue/empty?wait=1&timeout=60000&consumerGroup=g', { token: rw });
    await waitFor(() => broker.parked() === 1, 5000, 'the wait=1 pop parked at the broker');
    const [sent] = forwarded(broker).slice(before);
    const raw = queryOf(sent!.url);
    expect([brokerQueryParam(raw, 'wait'), brokerQueryParam(raw, 'timeout')]).toEqual(['true', String(MAX_TIMEOUT_MS)]);
    // The plan allows one parked poll: a second long poll, spelled either way, is over it.
    const second = await call(edge, 'GET', '/api/v1/pop/queue/empty?wait=1&consumerGroup=g', { token: rw });
    expect([second.status, (second.json as { code?: string }).code]).toEqual([429, 'rate_limited']);
    // Answered once the capped timeout ran out at the broker (the test would time out on the minute asked).
    expect((await parked).status).toBeLessThan(300);
  });
});
