/** A request's spans keep their order in time when the wall clock moves between them. */
import { ExportResultCode, hrTimeToNanoseconds } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace';
import { afterEach, expect, it, vi } from 'vitest';
import { Tracing } from '../../src/observability/tracing.js';
import { tracingSettings } from '../../src/observability/tracing-settings.js';
import { capturingLogger } from '../helpers/logs.js';

afterEach(() => {
  vi.restoreAllMocks();
});

it('every child span lies within its request span, though each span read a different wall clock', async () => {
  const spans: ReadableSpan[] = [];
  const exporter: SpanExporter = {
    export(batch, done) {
      spans.push(...batch);
      done({ code: ExportResultCode.SUCCESS });
    },
    shutdown: async () => {},
  };
  const settings = tracingSettings({
    enabled: true,
    endpoint: null,
    serviceName: null,
    parentBased: null,
    ratio: null,
    alwaysSampleRefusals: true,
    forwardBaggage: false,
    maxQueueSpans: 100,
    batchSpans: 10,
    exportDelayMs: 10,
    exportTimeoutMs: 1000,
  })!;
  const tracing = new Tracing(settings, capturingLogger('fatal').log, exporter);
  // A wall clock that steps back 3 ms at every reading: what the SDK's own per-span correction
  // turns into children that start before their parent (a millisecond-grained clock does it too).
  let wall = Date.now();
  vi.spyOn(Date, 'now').mockImplementation(() => (wall -= 3));
  const t0 = performance.now();
  const t = tracing.begin(undefined, t0);
  t.phase('auth.jwt', t0 + 0.01);
  t.decide(1);
  t.phase('limiter.admit', performance.now());
  t.attempt('POST', 'http://127.0.0.1:9/', null, false);
  t.attempted(201, null, performance.now());
  t.end({ method: 'POST', route: 'push', status: 201, code: null, tenant: 'acme', ratio: 1, requestId: 'r1', protocol: '1.1' });
  vi.restoreAllMocks();
  await tracing.close();
  const server = spans.find((s) => s.name === 'POST push')!;
  expect(spans.map((s) => s.name).sort()).toEqual(['POST', 'POST push', 'auth.jwt', 'limiter.admit']);
  const [from, to] = [hrTimeToNanoseconds(server.startTime), hrTimeToNanoseconds(server.endTime)];
  for (const s of spans) {
    expect(hrTimeToNanoseconds(s.startTime), s.name).toBeGreaterThanOrEqual(from);
    expect(hrTimeToNanoseconds(s.endTime), s.name).toBeLessThanOrEqual(to);
    expect(hrTimeToNanoseconds(s.endTime), s.name).toBeGreaterThanOrEqual(hrTimeToNanoseconds(s.startTime));
  }
});
