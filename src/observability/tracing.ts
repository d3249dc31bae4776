/**
 * OpenTelemetry traces of the edge's own work (docs/observability.md). Off unless configured: then
 * no Tracing exists, an exchange's `trace` stays null and every hook on the request path is one
 * null check (no span, no closure).
 *
 * On, each request gets a RequestTrace. Whether it is sampled is decided late, once the tenant (and
 * so its plan's ratio) is known: when the request is forwarded, or when it ends refused. Until then
 * the phases (authentication, the limiter's admit) are only timed; a sampled request's server span
 * is then opened at the request's start and its phases replayed as children, and the upstream
 * attempts are client spans whose context is what the broker receives in `traceparent`. Spans go
 * to a bounded queue and are exported in batches over OTLP/HTTP (protobuf); beyond the bound they
 * are dropped and counted, and the request path never waits for the collector.
 */
import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
  type Attributes,
  type Context,
  type HrTime,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { ExportResultCode, hrTime, type ExportResult } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOnSampler, BatchSpanProcessor, TracerProvider, type ReadableSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from './log.js';
import { validTraceparent } from './trace-context.js';
import { sampled, type TracingSettings } from './tracing-settings.js';

/** How long closing waits for the last spans to be exported. */
const CLOSE_FLUSH_MS = 2000;

/** What the request's end tells its server span. */
export interface TraceSummary {
  readonly method: string;
  /** The route's name (HTTP `http.route`): never the path, which holds a tenant's queue names. */
  readonly route: string | null;
  readonly status: number;
  /** The edge's own refusal code; null when the answer was relayed (or the edge's own success). */
  readonly code: string | null;
  readonly tenant: string | null;
  /** The tenant's (or its plan's) ratio; null = the edge's. */
  readonly ratio: number | null;
  readonly requestId: string;
  readonly protocol: string;
}

/** Spans counted as they leave: exported, refused by the bound, failed to export; and those waiting. */
interface SpanCounts {
  queued: number;
  exported: number;
  dropped: number;
  failed: number;
}

/** The process's tracer, its bounded export, and the counts /metrics shows. */
export class Tracing {
  readonly #provider: TracerProvider;
  readonly tracer: Tracer;
  readonly settings: TracingSettings;
  readonly #counts: SpanCounts = { queued: 0, exported: 0, dropped: 0, failed: 0 };

  constructor(settings: TracingSettings, log: Logger, exporter?: SpanExporter) {
    this.settings = settings;
    const counted = new CountingExporter(
      exporter ?? new OTLPTraceExporter({ url: settings.endpoint, timeoutMillis: settings.exportTimeoutMs }),
      this.#counts,
      log,
    );
    const batch = new BatchSpanProcessor({
      exporter: counted,
      // The bound is kept by BoundedProcessor (which counts what it refuses); the batcher's own never binds.
      maxQueueSize: settings.maxQueueSpans + settings.batchSpans,
      maxExportBatchSize: settings.batchSpans,
      scheduledDelayMillis: settings.exportDelayMs,
      exportTimeoutMillis: settings.exportTimeoutMs,
    });
    this.#provider = new TracerProvider({
      // Sampling is decided by RequestTrace before a span exists: every span made is recorded.
      sampler: new AlwaysOnSampler(),
      // process.pid tells a multi-worker instance's workers apart.
      resource: resourceFromAttributes({ 'service.name': settings.serviceName, 'process.pid': process.pid }),
      spanProcessors: [new BoundedProcessor(batch, this.#counts, settings.maxQueueSpans)],
    });
    this.tracer = this.#provider.getTracer('queen-edge');
  }

  readonly #brokers = new Map<string, BrokerAddress>();

  /** A broker URL's host and port, parsed once per broker. */
  brokerAddress(url: string): BrokerAddress {
    let a = this.#brokers.get(url);
    if (a === undefined) {
      const u = new URL(url);
      a = { 'server.address': u.hostname, 'server.port': Number(u.port) || (u.protocol === 'https:' ? 443 : 80) };
      // Bounded by the brokers the directory lists; a removed one's entry is a few bytes.
      this.#brokers.set(url, a);
    }
    return a;
  }

  /** A request's trace; `traceparent` is the client's header, joined only when valid W3C. */
  begin(traceparent: string | string[] | undefined, startedAt: number): RequestTrace {
    return new RequestTrace(this, typeof traceparent === 'string' && validTraceparent(traceparent) ? traceparent : null, startedAt);
  }

  registerMetrics(registry: Registry): void {
    const counts = this.#counts;
    new Counter({
      name: 'queen_edge_trace_spans_total',
      help: 'Spans of the edge by outcome: exported, dropped (the export queue was full), failed (the collector refused or was unreachable).',
      labelNames: ['outcome'] as const,
      registers: [registry],
      collect() {
        this.reset();
        this.inc({ outcome: 'exported' }, counts.exported);
        this.inc({ outcome: 'dropped' }, counts.dropped);
        this.inc({ outcome: 'failed' }, counts.failed);
      },
    });
    new Gauge({
      name: 'queen_edge_trace_spans_queued',
      help: 'Spans waiting for export.',
      registers: [registry],
      collect() {
        this.set(counts.queued);
      },
    });
  }

  /** Exports what is queued, for at most CLOSE_FLUSH_MS: a collector that hangs does not hold the drain. */
  async close(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CLOSE_FLUSH_MS);
    });
    await Promise.race([this.#provider.shutdown(), bound]);
    clearTimeout(timer);
  }
}

/** A broker's address as span attributes. */
interface BrokerAddress {
  readonly 'server.address': string;
  readonly 'server.port': number;
}

/** A phase timed before the sampling decision, replayed as a child span if the request is sampled. */
interface Phase {
  readonly name: string;
  readonly start: number;
  readonly end: number;
  readonly attributes: Attributes | undefined;
}

/**
 * One request's spans. Times are performance.now() readings, as the exchange keeps them, handed
 * to the SDK through #at. The client's trace context is its own request's
 * only: its trace id and flag are joined, its tracestate is never copied into the edge's spans,
 * and nothing it sends becomes an attribute.
 */
export class RequestTrace {
  readonly #tracing: Tracing;
  /** The client's traceparent, valid, or null. */
  readonly #parent: string | null;
  readonly #startedAt: number;
  #decided = false;
  #sampled = false;
  #phases: Phase[] | null = null;
  #server: Span | null = null;
  #context: Context = ROOT_CONTEXT;
  #client: Span | null = null;
  #clientStart = 0;
  #clientParked = false;
  /** Wall clock minus the monotonic clock, taken once when the trace opens. */
  #offset = 0;

  constructor(tracing: Tracing, parent: string | null, startedAt: number) {
    this.#tracing = tracing;
    this.#parent = parent;
    this.#startedAt = startedAt;
  }

  /** A phase that began at `start` and ends now. */
  phase(name: string, start: number, attributes?: Attributes): void {
    const end = performance.now();
    if (this.#server !== null) this.#child(name, start, end, attributes);
    else {
      // Kept also when not sampled: a refusal may still be traced at the end (alwaysSampleRefusals).
      this.#phases ??= [];
      this.#phases.push({ name, start, end, attributes });
    }
  }

  /** Decides once, with the tenant's ratio (null: the edge's); true when the request is traced. */
  decide(ratio: number | null): boolean {
    if (this.#decided) return this.#sampled;
    this.#decided = true;
    const s = this.#tracing.settings;
    const parentSampled = this.#parent === null ? null : (Number.parseInt(this.#parent.slice(53, 55), 16) & TraceFlags.SAMPLED) !== 0;
    // A tenant (or plan) set to 0 is never traced, whatever its clients send: a client cannot fill
    // the process's export queue, which every tenant's spans share, against its operator's choice.
    this.#sampled = ratio !== 0 && sampled(parentSampled, s.parentBased, ratio ?? s.ratio, Math.random());
    if (this.#sampled) this.#open();
    return this.#sampled;
  }

  /**
   * One attempt on a broker begins: its client span's context as a traceparent for the broker, or
   * null when the request is not traced (the client's own is relayed then).
   */
  attempt(method: string, broker: string, lane: string | null, parked: boolean): string | null {
    const server = this.#server;
    if (server === null) return null;
    if (lane !== null) server.setAttribute('queen.lane', lane);
    this.#clientStart = performance.now();
    this.#clientParked = parked;
    const client = this.#tracing.tracer.startSpan(
      method,
      {
        kind: SpanKind.CLIENT,
        startTime: this.#at(this.#clientStart),
        attributes: { 'http.request.method': method, ...this.#tracing.brokerAddress(broker), 'queen.long_poll': parked },
      },
      this.#context,
    );
    this.#client = client;
    const c = client.spanContext();
    return `00-${c.traceId}-${c.spanId}-01`;
  }

  /**
   * The attempt ended: its status (0: no response), failure, and when the broker's head came
   * (performance.now(); 0: never). A long poll's time parked at the broker is a span of its own.
   */
  attempted(status: number, failure: string | null, headersAt: number): void {
    const client = this.#client;
    if (client === null) return;
    this.#client = null;
    if (status !== 0) client.setAttribute('http.response.status_code', status);
    if (failure !== null) {
      client.setAttribute('error.type', failure);
      client.setStatus({ code: SpanStatusCode.ERROR });
    } else if (status >= 500) client.setStatus({ code: SpanStatusCode.ERROR });
    if (this.#clientParked && headersAt !== 0) {
      this.#child('long_poll.parked', this.#clientStart, headersAt, undefined, trace.setSpan(this.#context, client));
    }
    client.end(this.#at(performance.now()));
  }

  /** A JWKS fetch the token's verification waited for since `since` (auth/jwt.ts, JwksWatch). */
  jwksFetched(since: number, loaded: boolean): void {
    this.phase('auth.jwks_fetch', since, { 'queen.jwks.loaded': loaded });
  }

  /** A broker slot waited for since `start`: `ok` false when the wait was given up. */
  slotWaited(start: number, broker: string, ok: boolean): void {
    this.phase('broker.slot_wait', start, { 'server.address': this.#tracing.brokerAddress(broker)['server.address'], 'queen.slot.granted': ok });
  }

  /**
   * The request is over: a sampled one (or a refusal, when asked for) gets its server span ended.
   * A tenant at ratio 0 is never traced, refusals included: refusals are cheap to cause, and its
   * clients must not fill the queue every tenant's spans share.
   */
  end(s: TraceSummary): void {
    if (!this.decide(s.ratio) && !(s.code !== null && s.ratio !== 0 && this.#tracing.settings.alwaysSampleRefusals)) return;
    if (this.#server === null) this.#open();
    const server = this.#server!;
    server.updateName(s.route === null ? s.method : `${s.method} ${s.route}`);
    const attributes: Attributes = {
      'http.request.method': s.method,
      'http.response.status_code': s.status,
      'network.protocol.version': s.protocol,
      'queen.request_id': s.requestId,
    };
    if (s.route !== null) attributes['http.route'] = s.route;
    if (s.tenant !== null) attributes['queen.tenant'] = s.tenant;
    if (s.code !== null) {
      attributes['queen.code'] = s.code;
      attributes['error.type'] = s.code;
    }
    server.setAttributes(attributes);
    // A server span is in error for a 5xx only (HTTP semantic conventions): a 4xx is the client's.
    if (s.status >= 500 || s.status === 0) server.setStatus({ code: SpanStatusCode.ERROR });
    // A client span still open (the client left mid-answer) ends with its request.
    const now = this.#at(performance.now());
    this.#client?.end(now);
    server.end(now);
  }

  /** The server span from the request's start, under the client's context when it sent one, and the phases timed so far. */
  #open(): void {
    const parent = this.#parent;
    const context =
      parent === null
        ? ROOT_CONTEXT
        : trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.slice(3, 35), spanId: parent.slice(36, 52), traceFlags: TraceFlags.SAMPLED, isRemote: true });
    this.#offset = Date.now() - (performance.now() + performance.timeOrigin);
    const server = this.#tracing.tracer.startSpan('request', { kind: SpanKind.SERVER, startTime: this.#at(this.#startedAt) }, context);
    this.#server = server;
    this.#context = trace.setSpan(ROOT_CONTEXT, server);
    const phases = this.#phases;
    this.#phases = null;
    if (phases !== null) for (const p of phases) this.#child(p.name, p.start, p.end, p.attributes);
  }

  #child(name: string, start: number, end: number, attributes: Attributes | undefined, context = this.#context): void {
    this.#tracing.tracer
      .startSpan(name, { kind: SpanKind.INTERNAL, startTime: this.#at(start), ...(attributes ? { attributes } : {}) }, context)
      .end(this.#at(end));
  }

  /**
   * A performance.now() reading as the span time the SDK keeps as given. Given a number, the SDK
   * corrects each span by its own wall-clock reading (millisecond-grained), so a child could start
   * before its parent; one correction per request keeps the tree's order.
   */
  #at(t: number): HrTime {
    return hrTime(t + this.#offset);
  }
}

/** Keeps the export queue bounded: a span beyond `max` waiting is dropped and counted, never waited for. */
class BoundedProcessor implements SpanProcessor {
  constructor(
    private readonly inner: SpanProcessor,
    private readonly counts: SpanCounts,
    private readonly max: number,
  ) {}

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    if (this.counts.queued >= this.max) {
      this.counts.dropped++;
      return;
    }
    this.counts.queued++;
    this.inner.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }
}

/** Counts what each export did, and says once in the log when the collector stops (and starts again) taking spans. */
class CountingExporter implements SpanExporter {
  #failing = false;

  constructor(
    private readonly inner: SpanExporter,
    private readonly counts: SpanCounts,
    private readonly log: Logger,
  ) {}

  export(spans: ReadableSpan[], done: (result: ExportResult) => void): void {
    this.inner.export(spans, (result) => {
      const counts = this.counts;
      counts.queued -= spans.length;
      if (result.code === ExportResultCode.SUCCESS) {
        counts.exported += spans.length;
        if (this.#failing) this.log.info('trace export: the collector takes spans again');
        this.#failing = false;
      } else {
        counts.failed += spans.length;
        if (!this.#failing) this.log.warn({ err: result.error }, 'trace export failed; spans are counted as failed until the collector takes them again');
        this.#failing = true;
      }
      done(result);
    });
  }

  shutdown(): Promise<void> {
    return this.inner.shutdown();
  }

  forceFlush(): Promise<void> {
    return this.inner.forceFlush?.() ?? Promise.resolve();
  }
}
