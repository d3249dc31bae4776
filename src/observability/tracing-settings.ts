/**
 * The `tracing` section resolved, and the sampling decision: pure, and apart from tracing.ts so
 * that an edge with tracing off never loads the OpenTelemetry SDK (app.ts imports that only when
 * tracing is on).
 */
import type { TracingConfig } from '../config/schema.js';

/** The `tracing` section with every default applied; null when tracing is off. */
export interface TracingSettings {
  readonly endpoint: string;
  readonly serviceName: string;
  readonly parentBased: boolean;
  readonly ratio: number;
  readonly alwaysSampleRefusals: boolean;
  readonly forwardBaggage: boolean;
  readonly maxQueueSpans: number;
  readonly batchSpans: number;
  readonly exportDelayMs: number;
  readonly exportTimeoutMs: number;
}

export function tracingSettings(t: TracingConfig): TracingSettings | null {
  if (!t.enabled) return null;
  return {
    endpoint: t.endpoint ?? 'http://localhost:4318/v1/traces',
    serviceName: t.serviceName ?? 'queen-edge',
    parentBased: t.parentBased ?? true,
    ratio: t.ratio ?? 1,
    alwaysSampleRefusals: t.alwaysSampleRefusals,
    forwardBaggage: t.forwardBaggage,
    maxQueueSpans: t.maxQueueSpans,
    batchSpans: Math.min(t.batchSpans, t.maxQueueSpans),
    exportDelayMs: t.exportDelayMs,
    exportTimeoutMs: t.exportTimeoutMs,
  };
}

/**
 * The sampling decision, pure: a parent's flag when parent-based and the client sent one, else a
 * draw in [0, 1) against the ratio.
 */
export function sampled(parentSampled: boolean | null, parentBased: boolean, ratio: number, draw: number): boolean {
  if (parentBased && parentSampled !== null) return parentSampled;
  return draw < ratio;
}
