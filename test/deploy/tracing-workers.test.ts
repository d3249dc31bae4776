/**
 * Traces from a multi-worker instance started by the CLI: the OTEL_* variables are read by the
 * primary (the workers get the resolved configuration), and every worker exports its own spans.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { forwarded, TEST_PLAN, TEST_SECRET, token } from '../helpers/edge.js';
import { SPAN_KIND, startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { freePort, freshRequest, spawnEdge, type EdgeProcess } from './edge-process.js';

let broker: BrokerDouble;
let receiver: OtlpReceiver;
let edge: EdgeProcess;
let httpsPort: number;
const prefix = uniquePrefix();

beforeAll(async () => {
  broker = await startBrokerDouble({ name: 'b1' });
  receiver = await startOtlpReceiver();
  httpsPort = await freePort();
  edge = await spawnEdge(
    {
      server: { https: { host: '127.0.0.1', port: httpsPort }, admin: { host: '127.0.0.1', port: await freePort() }, workers: 2 },
      log: { level: 'info' },
      redis: { url: SHARED_REDIS_URL, keyPrefix: prefix },
      auth: { secret: TEST_SECRET },
      upstream: { healthIntervalMs: 200, healthTimeoutMs: 2000 },
      tracing: { enabled: true, exportDelayMs: 20 },
      plans: { test: TEST_PLAN },
      tenants: { acme: { plan: 'test', hosts: ['acme.localhost'], brokers: [broker.url] } },
    },
    undefined,
    { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url.replace(/\/v1\/traces$/, ''), OTEL_SERVICE_NAME: 'edge-workers' },
  );
  await edge.waitForLog((l) => l.msg === 'all workers listening', 60_000);
}, 90_000);

afterAll(async () => {
  await edge?.kill();
  await broker?.close();
  await receiver?.close();
  const redis = await connectTest(SHARED_REDIS_URL);
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

describe('tracing with server.workers: 2', () => {
  it("each worker exports its requests' spans under the service name the primary read from the environment", async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const ids = ['w-1', 'w-2', 'w-3', 'w-4'];
    for (const id of ids) {
      const r = await freshRequest(`https://127.0.0.1:${httpsPort}/api/v1/push`, {
        method: 'POST',
        headers: { host: 'acme.localhost', authorization: `Bearer ${tok}`, 'content-type': 'application/json', 'x-request-id': id },
        body: JSON.stringify({ items: [{ queue: 'q', payload: 1 }] }),
      });
      expect(r.status).toBe(201);
    }
    const servers = () => receiver.spans.filter((s) => s.kind === SPAN_KIND.server && ids.includes(String(s.attributes['queen.request_id'])));
    await waitFor(() => servers().length === ids.length, 10_000, 'a server span for every request');
    expect(new Set(servers().map((s) => s.resource['service.name']))).toEqual(new Set(['edge-workers']));
    // Fresh connections are dealt round-robin: both workers served, and both exported.
    expect(new Set(servers().map((s) => s.resource['process.pid'])).size).toBe(2);
    // The broker got each request's client span.
    for (const server of servers()) {
      const client = receiver.spans.find((s) => s.parentSpanId === server.spanId && s.kind === SPAN_KIND.client)!;
      const sent = forwarded(broker).find((q) => q.headers['x-request-id'] === server.attributes['queen.request_id'])!;
      expect(sent.headers.traceparent).toBe(`00-${server.traceId}-${client.spanId}-01`);
    }
  });
});
