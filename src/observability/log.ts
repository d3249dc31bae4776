/** The process logger: pino to stdout, with credentials redacted. */
import { pino, type Logger } from 'pino';

export type { Logger };

/** Paths that must never reach a log line. */
const REDACT = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'headers.cookie',
  'res.headers["set-cookie"]',
];

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return pino({ level, redact: { paths: REDACT, censor: '[redacted]' }, base: { pid: process.pid } }, destination ?? pino.destination({ sync: false }));
}

/** A logger that writes nothing (tests and tools). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
