/**
 * The seam between the pipeline and metering (DESIGN §7). The pipeline reports each finished
 * exchange once; the recorder counts in memory. Parsing of relayed bodies happens after the
 * response was sent, so counting never delays a client.
 */
import type { ErrorCode } from '../errors.js';
import type { RouteSpec } from '../routes/table.js';

/** One finished request, as metering sees it. */
export interface Exchange {
  readonly tenantId: string;
  readonly route: RouteSpec;
  readonly status: number;
  /** Refusal code, when the edge refused. */
  readonly code: ErrorCode | null;
  readonly bytesIn: number;
  readonly bytesOut: number;
  /** Items the request body pushes (push items, transaction push items); 0 for other routes. */
  readonly requestMessages: number;
  /** Parsed 200/201 response body for push, pop and ack routes; undefined otherwise. */
  readonly response: unknown;
}

/** Receives every finished exchange; must not throw and must not do I/O inline. */
export interface UsageRecorder {
  record(x: Exchange): void;
}

/** Counts nothing: switches metering off (tests, benchmarks). */
export const NO_USAGE: UsageRecorder = Object.freeze({ record(): void {} });
