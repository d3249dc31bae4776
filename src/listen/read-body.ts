/**
 * Reading a request body, for the request path and the admin API alike: the same bytes whichever
 * protocol carried them (h1 IncomingMessage or h2 stream: both are read through the same events).
 */
import { edgeError, isEdgeError, type EdgeError } from '../errors.js';
import type { BodyAccount } from '../body/budget.js';
import type { BodyPace, PacedBody } from '../body/pace.js';
import type { EdgeRequest } from './servers.js';

/** What a tenant's body is read against: its account in the budget, the pace, the deadline. */
interface Budget {
  readonly account: BodyAccount;
  readonly pace: BodyPace;
  readonly deadlineMs: number;
}

/**
 * Reads the whole body up to `limit` bytes; 413 beyond it (declared or measured). With `budget`
 * (a tenant's request), every byte is taken into its account as it arrives (over a budget, or
 * taken back for a fairer share: the budget's refusal), and the body must keep the pace and arrive
 * within its deadline (408 otherwise). A refusal stops reading: the caller answers it and closes
 * the connection.
 */
export function readBody(req: EdgeRequest, limit: number, budget: Budget | null = null): Promise<Buffer | EdgeError> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) return Promise.resolve(bodyTooLarge(limit));
  return new Promise((resolve) => new BodyRead(req, limit, budget, resolve));
}

/**
 * One body being read: its chunks, its place in the pace's sweep (it is the PacedBody), and its
 * listeners, bound once. One object per read on the request path, not a closure per event.
 */
class BodyRead implements PacedBody {
  readonly #chunks: Buffer[] = [];
  #size = 0;
  #done = false;
  paceFrom = 0;
  paceBase = 0;
  readonly paceDeadline: number;
  readonly #onData = (chunk: Buffer): void => this.#data(chunk);
  readonly #onEnd = (): void => this.#settle(this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#size));
  readonly #onError = (): void => this.#settle(edgeError('invalid_request', 'request body aborted'));

  constructor(
    private readonly req: EdgeRequest,
    private readonly limit: number,
    private readonly budget: Budget | null,
    private readonly resolve: (v: Buffer | EdgeError) => void,
  ) {
    // In place of a deadline timer: the pace's one sweep watches every body being received.
    if (budget !== null) {
      this.paceFrom = budget.pace.now();
      this.paceDeadline = this.paceFrom + budget.deadlineMs;
      budget.pace.watch(this);
      budget.account.onEvict = (refusal) => this.#settle(refusal);
    } else this.paceDeadline = Infinity;
    req.on('data', this.#onData);
    req.on('end', this.#onEnd);
    req.on('error', this.#onError);
    req.on('aborted', this.#onError);
  }

  paceBytes(): number {
    return this.#size;
  }

  paceReading(): boolean {
    return true;
  }

  paceCut(late: boolean): void {
    const b = this.budget!;
    this.#settle(
      edgeError(
        'request_timeout',
        late ? `request body not received within ${b.deadlineMs} ms` : `request body slower than ${b.pace.settings.minBytesPerSec} bytes/s`,
      ),
    );
  }

  #data(chunk: Buffer): void {
    this.#size += chunk.length;
    if (this.#size > this.limit) {
      this.#settle(bodyTooLarge(this.limit));
      return;
    }
    const over = this.budget === null ? null : this.budget.account.take(chunk.length);
    if (over !== null) this.#settle(over);
    else this.#chunks.push(chunk);
  }

  #settle(v: Buffer | EdgeError): void {
    if (this.#done) return;
    this.#done = true;
    const { req, budget } = this;
    if (budget !== null) {
      budget.pace.unwatch(this);
      budget.account.onEvict = null;
      if (!isEdgeError(v)) budget.account.arrived();
    }
    req.removeListener('data', this.#onData);
    req.removeListener('end', this.#onEnd);
    req.removeListener('error', this.#onError);
    req.removeListener('aborted', this.#onError);
    // Nothing more is read of a refused body.
    if (isEdgeError(v)) req.pause();
    this.resolve(v);
  }
}

/** The 413 for a body above `limit` bytes. */
export function bodyTooLarge(limit: number): EdgeError {
  return edgeError('payload_too_large', `request body exceeds ${limit} bytes`);
}
