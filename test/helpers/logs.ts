/** A real pino logger whose JSON lines tests can read back. */
import { Writable } from 'node:stream';
import { createLogger, type Logger } from '../../src/observability/log.js';
import { waitFor } from './wait.js';

/** One parsed log line; fields beyond level and msg depend on the call. */
export type LogLine = Record<string, unknown> & { level: number; msg: string };

export interface CapturedLog {
  readonly log: Logger;
  readonly lines: LogLine[];
}

/** A logger at `level` writing into `lines` (parsed), through the project's own createLogger. */
export function capturingLogger(level = 'debug'): CapturedLog {
  const lines: LogLine[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line) lines.push(JSON.parse(line) as LogLine);
      done();
    },
  });
  return { log: createLogger(level, sink), lines };
}

/** The access-log line of the request `reqId`, once written (the log stream is asynchronous). */
export async function accessLine(captured: CapturedLog, reqId: unknown): Promise<LogLine> {
  const find = () => captured.lines.find((l) => l.msg === 'request' && l.reqId === reqId);
  await waitFor(() => find() !== undefined, 5000, `the access line of ${String(reqId)}`);
  return find()!;
}
