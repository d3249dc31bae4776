/**
 * Reading a request body, for the request path and the admin API alike: the same bytes whichever
 * protocol carried them (h1 IncomingMessage or h2 stream: both are read through the same events).
 */
import { edgeError, isEdgeError, type EdgeError } from '../errors.js';
import type { BodyAccount } from '../body/budget.js';
import type { BodyPace, PacedBody } from '../body/pace.js';
import type { EdgeRequest } from './servers.js';

/**
 * Reads the whole body up to `limit` bytes; 413 beyond it (declared or measured). With `budget`
 * (a tenant's request), every byte is taken into its account as it arrives (over a budget, or
 * taken back for a fairer share: the budget's refusal), and the body must keep the pace and arrive
 * within its deadline (408 otherwise). A refusal stops reading: the caller answers it and closes
 * the connection.
 */
export function readBody(
  req: EdgeRequest,
  limit: number,
  budget: { account: BodyAccount; pace: BodyPace; deadlineMs: number } | null = null,
): Promise<Buffer | EdgeError> {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > limit) return Promise.resolve(bodyTooLarge(limit));
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let done = false;
    const settle = (v: Buffer | EdgeError) => {
      if (done) return;
      done = true;
      if (budget !== null) {
        budget.pace.unwatch(paced!);
        budget.account.onEvict = null;
        if (!isEdgeError(v)) budget.account.arrived();
      }
      req.removeListener('data', onData);
      req.removeListener('end', onEnd);
      req.removeListener('error', onError);
      req.removeListener('aborted', onError);
      // Nothing more is read of a refused body.
      if (isEdgeError(v)) req.pause();
      resolve(v);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return settle(bodyTooLarge(limit));
      const over = budget === null ? null : budget.account.take(chunk.length);
      if (over !== null) return settle(over);
      chunks.push(chunk);
    };
    const onEnd = () => settle(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    const onError = () => settle(edgeError('invalid_request', 'request body aborted'));
    // In place of a deadline timer: the pace's one sweep watches every body being received.
    const paced: PacedBody | null =
      budget === null
        ? null
        : {
            paceFrom: budget.pace.now(),
            paceBase: 0,
            paceDeadline: budget.pace.now() + budget.deadlineMs,
            paceBytes: () => size,
            paceReading: () => true,
            paceCut: (late) =>
              settle(
                edgeError(
                  'request_timeout',
                  late ? `request body not received within ${budget.deadlineMs} ms` : `request body slower than ${budget.pace.settings.minBytesPerSec} bytes/s`,
                ),
              ),
          };
    if (budget !== null) {
      budget.pace.watch(paced!);
      budget.account.onEvict = settle;
    }
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onError);
  });
}

/** The 413 for a body above `limit` bytes. */
export function bodyTooLarge(limit: number): EdgeError {
  return edgeError('payload_too_large', `request body exceeds ${limit} bytes`);
}
