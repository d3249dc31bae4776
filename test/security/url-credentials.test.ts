/**
 * Credentials in a broker URL (`http://user:pass@host`, typically from `${VAR}`) never leave the
 * edge: not in log lines, not in admin answers (tenant view, brokers, reloads), not as a label of
 * the tokenless /metrics. Each place shows the URL with its user info as `***`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { admin } from '../admin/admin-call.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { accessLine, capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';

const SECRET = 's3cret-pw-4f1c9a';
const captured = capturingLogger('info');
let broker: BrokerDouble;
let h: EdgeHarness;
let withCredentials: string;
let redacted: string;
let config: RawConfig;

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'creds' });
  const port = new URL(broker.url).port;
  withCredentials = `http://edge-user:${SECRET}@127.0.0.1:${port}`;
  redacted = `http://***@127.0.0.1:${port}`;
  config = testConfig([withCredentials], { server: { admin: { token: 'admin-token-for-tests-0123456789' } } });
  h = await startEdge(config, { log: captured.log });
});

afterAll(async () => {
  await h?.close();
  await broker?.close();
});

describe("a broker URL's user info is redacted wherever it is shown", () => {
  it('access log, admin answers, reload problems, /metrics labels and the broker-down log name the broker without its credentials', async () => {
    const push = await call(h, 'POST', '/api/v1/push', {
      token: await token({ roles: ['read-write'], tenant: 'acme' }),
      body: { items: [{ queue: 'q', payload: 1 }] },
    });
    expect(push.status).toBe(201);
    expect(forwarded(broker)).toHaveLength(1);
    expect((await accessLine(captured, push.headers['x-request-id'])).broker).toBe(redacted);

    const metrics = (await admin(h, 'GET', '/metrics', { token: null })).text;
    expect(metrics).toContain(`queen_edge_broker_up{broker="${redacted}"} 1`);

    const tenant = await admin(h, 'GET', '/admin/v1/tenants/acme');
    expect(tenant.json.brokers).toEqual([redacted]);
    const brokers = await admin(h, 'GET', '/admin/v1/brokers');
    expect(brokers.json.clusters[0].brokers[0].url).toBe(redacted);

    // A reload refused because a second tenant lists the same broker: the problem names it.
    const shared: RawConfig = { ...config, tenants: { ...config.tenants, other: { ...config.tenants.acme!, hosts: ['other.localhost'] } } };
    await expect(h.app.reload(shared)).rejects.toThrow(/both list broker/);
    const reloads = await admin(h, 'GET', '/admin/v1/reloads');
    expect(reloads.json.last.problems).toEqual([expect.stringContaining(`both list broker "${redacted}"`)]);

    await broker.close();
    await waitFor(() => captured.lines.some((l) => l.msg === 'broker down'), 10_000, 'the broker-down log line');
    expect(captured.lines.find((l) => l.msg === 'broker down')!.url).toBe(redacted);

    for (const text of [metrics, tenant.text, brokers.text, reloads.text, JSON.stringify(captured.lines)]) expect(text).not.toContain(SECRET);
  });
});
