/**
 * The seam between the pipeline and metering. Each finished exchange is reported once; the
 * recorder counts in memory. Relayed answers are read as they pass (answer-meter.ts), never held
 * or parsed whole.
 */
import type { ErrorCode } from '../errors.js';
import type { RouteSpec } from '../routes/table.js';
import type { AnswerFacts } from './answer-scan.js';

/** One finished request, as metering sees it. */
export interface Exchange {
  readonly tenantId: string;
  readonly route: RouteSpec;
  readonly status: number;
  /** Refusal code, when the edge refused. */
  readonly code: ErrorCode | null;
  /** Request body bytes: a body read whole, at its length; a streamed body, as relayed to the broker. */
  readonly bytesIn: number;
  readonly bytesOut: number;
  /** Acknowledgements the request body carries (ack, ack batch, a transaction's ack operations); 0 for other routes. */
  readonly requestAcks: number;
  /** Items the request body pushes (push items, transaction push items); 0 for other routes. */
  readonly requestMessages: number;
  /** A pop with `autoAck=true`: the broker commits what it delivers, so each delivered message is also an ack. */
  readonly autoAck: boolean;
  /** What a 200/201 answer of a metered route said; null otherwise (none, cut, or not JSON). */
  readonly response: AnswerFacts | null;
  /**
   * The request reached a broker but its answer was not read (the client left before it came
   * back, or it came in a coding the edge cannot decode): the broker may have acted on all of it,
   * so its pushes and acks are counted from the request.
   */
  readonly answerLost: boolean;
}

/** Receives every finished exchange; must not throw and must not do I/O inline. */
export interface UsageRecorder {
  record(x: Exchange): void;
}

/** Counts nothing: switches metering off (tests, benchmarks). */
export const NO_USAGE: UsageRecorder = Object.freeze({ record(): void {} });

/**
 * The usage side of one request: the facts metering counts, and the rule that decides when they
 * are complete. An exchange is recorded once, when its response ended (finish or close) and, if
 * it was forwarded, once the proxy handed over its answer's facts (where it is counted: pushes,
 * pops, acks, transactions), whichever of the two comes last. The pipeline's request context extends it, so
 * this costs no allocation.
 */
export class MeteredExchange<T extends { readonly id: string } = { readonly id: string }> {
  /** Null until the tenant is known; an exchange without one is not metered. */
  tenant: T | null = null;
  route: RouteSpec | null = null;
  status = 0;
  code: ErrorCode | null = null;
  bytesIn = 0;
  bytesOut = 0;
  /** Push items of the request body (a transaction's pushes are counted from here). */
  requestMessages = 0;
  /** Acknowledgements of the request body (ack routes; a transaction's are counted from here). */
  requestAcks = 0;
  /** See Exchange.autoAck. */
  autoAck = false;
  /** See Exchange.answerLost. */
  answerLost = false;
  #awaitBody = false;
  #ended = false;
  #recorded = false;
  #response: AnswerFacts | null = null;
  readonly #recorder: UsageRecorder;

  constructor(recorder: UsageRecorder) {
    this.#recorder = recorder;
  }

  /** The relayed answer's facts will be handed to relayed(): record only after that. */
  expectBody(): void {
    this.#awaitBody = true;
  }

  /** What the relayed answer said (null: none, cut, or not JSON). */
  relayed(facts: AnswerFacts | null): void {
    this.#response = facts;
    this.#awaitBody = false;
    if (this.#ended) this.#record();
  }

  /** The response finished or the client left. */
  ended(): void {
    this.#ended = true;
    if (!this.#awaitBody) this.#record();
  }

  #record(): void {
    if (this.#recorded || this.tenant === null || this.route === null) return;
    this.#recorded = true;
    this.#recorder.record({
      tenantId: this.tenant.id,
      route: this.route,
      status: this.status,
      code: this.code,
      bytesIn: this.bytesIn,
      bytesOut: this.bytesOut,
      requestMessages: this.requestMessages,
      requestAcks: this.requestAcks,
      autoAck: this.autoAck,
      response: this.#response,
      answerLost: this.answerLost,
    });
  }
}
