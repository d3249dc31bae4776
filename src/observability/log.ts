/** The process logger: pino to stdout, JSON for machines or pretty for a person, with credentials redacted. */
import { createRequire } from 'node:module';
import { pino, type Logger } from 'pino';
import { redactUserInfo } from '../net/redact-url.js';

export type { Logger };

/** `log.format`: `auto` is pretty when stdout is a terminal, JSON otherwise. */
export type LogFormat = 'auto' | 'json' | 'pretty';

/** Paths that must never reach a log line. */
const REDACT = ['req.headers.authorization', 'req.headers.cookie', 'headers.authorization', 'headers.cookie', 'res.headers["set-cookie"]'];

/**
 * Lines are written to stdout in batches of this many bytes, or every LOG_FLUSH_MS, whichever
 * comes first: one write(2) per access line cost 6 µs per request in the bench profile. pino
 * flushes what is left on exit; a SIGKILL loses at most the last LOG_FLUSH_MS of lines.
 */
const LOG_BUFFER_BYTES = 4096;
const LOG_FLUSH_MS = 250;

/** Marks a destination whose lines are read by people (pino-pretty): the access log writes them a sentence. */
export const HUMAN_DESTINATION: unique symbol = Symbol('queen-edge.human-destination');

/** How lines date and name their level (`log.time`, `log.levelNames`); pino's defaults when absent. */
export interface LineStyle {
  /** `epoch`: milliseconds (pino's default); `iso`: an ISO 8601 string. */
  readonly time?: 'epoch' | 'iso';
  /** `level` as a name (`"info"`) instead of pino's number (30). */
  readonly levelNames?: boolean;
}

export function createLogger(level: string, destination?: NodeJS.WritableStream | ReturnType<typeof pino.destination>, style: LineStyle = {}): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACT, censor: '[redacted]' },
      // Whatever a line names (a broker URL, a problem, an error), a URL's credentials stay out of it.
      hooks: { streamWrite: redactUserInfo },
      base: { pid: process.pid },
      ...(style.time === 'iso' ? { timestamp: pino.stdTimeFunctions.isoTime } : {}),
      ...(style.levelNames ? { formatters: { level: (label: string) => ({ level: label }) } } : {}),
    },
    destination ?? bufferedStdout(),
  );
}

function bufferedStdout(): ReturnType<typeof pino.destination> {
  const dest = pino.destination({ sync: false, minLength: LOG_BUFFER_BYTES });
  const timer = setInterval(() => {
    try {
      dest.flush();
    } catch {
      // Destroyed at shutdown: nothing left to flush.
      clearInterval(timer);
    }
  }, LOG_FLUSH_MS);
  timer.unref();
  return dest;
}

/** What `format` means for an output that is (or is not) a terminal. */
export function resolveLogFormat(format: LogFormat, isTty: boolean): 'json' | 'pretty' {
  return format === 'auto' ? (isTty ? 'pretty' : 'json') : format;
}

type PrettyFactory = (opts: Record<string, unknown>) => NodeJS.WritableStream;

/** pino-pretty when installed (an optional dependency: a production install may leave it out). */
function loadPretty(): PrettyFactory | null {
  try {
    return createRequire(import.meta.url)('pino-pretty') as PrettyFactory;
  } catch {
    return null;
  }
}

/** The process's logger as the `log:` section asks, on stdout (a pretty one on `prettyOut` when given: tests). */
export function processLogger(
  cfg: { level: string; format: LogFormat } & LineStyle,
  isTty = process.stdout.isTTY === true,
  prettyOut?: NodeJS.WritableStream,
): Logger {
  const style: LineStyle = { ...(cfg.time ? { time: cfg.time } : {}), ...(cfg.levelNames ? { levelNames: true } : {}) };
  if (resolveLogFormat(cfg.format, isTty) === 'json') return createLogger(cfg.level, undefined, style);
  const pretty = loadPretty();
  if (pretty === null) {
    const log = createLogger(cfg.level, undefined, style);
    log.warn('log.format pretty needs the optional package pino-pretty, which is not installed: logging JSON');
    return log;
  }
  // One line per entry: a request's fields are one sentence (access-log.ts), others follow on the line.
  const human = pretty({
    colorize: isTty,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    singleLine: true,
    ...(prettyOut ? { destination: prettyOut } : {}),
  });
  (human as unknown as Record<symbol, boolean>)[HUMAN_DESTINATION] = true;
  return createLogger(cfg.level, human);
}

/** A logger that writes nothing (tests and tools). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
