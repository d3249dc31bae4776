/**
 * The access log: one JSON line per request, in pino's own line format, on the process logger's
 * destination (docs/decisions/0009-access-log-line.md). The line has a fixed shape, so it is built
 * directly instead of through pino's generic serializer, which cost 8 µs per request in the bench
 * profile (a walk over the object's keys with a stringify per value); values that may hold any
 * character go through JSON.stringify, the rest are plain by construction. Time and level are
 * written by the logger's own functions, so `log.time` and `log.levelNames` apply here too. On a
 * destination meant for people (log.format pretty) the line is one readable sentence instead.
 */
import { pino, type Logger } from 'pino';
import { redactUserInfo } from '../net/redact-url.js';
import { HUMAN_DESTINATION } from './log.js';

/** What one access-log line says. */
export interface AccessRecord {
  /** A UUID or a client id that matched a plain pattern: no escaping needed. */
  readonly reqId: string;
  /** A tenant id (its pattern is plain) or null. */
  readonly tenant: string | null;
  /** The token's subject: client input. */
  readonly sub: string | null;
  /** A route name from the route table, or null. */
  readonly route: string | null;
  readonly method: string;
  readonly status: number;
  readonly code: string | null;
  readonly bytesIn: number;
  readonly bytesOut: number;
  readonly ms: number;
  /** A broker URL from the configuration (its user info is redacted when written). */
  readonly broker: string | null;
  readonly proto: string;
  /** The trace id part of a traceparent: client input. */
  readonly trace: string | null;
  /** The client's address, after trusted proxies: an IP literal (or an IPv6 /64). */
  readonly client: string;
  /** The Host (or :authority) named, without its port, lowercased: client input. */
  readonly host: string;
  /** The request path without its query, at most PATH_CHARS characters: client input. */
  readonly path: string;
  /** Length of the query string (its content may hold secrets, so it is not logged). */
  readonly queryLength: number;
  /** The broker's status when its answer was relayed; null when the edge answered. */
  readonly upstreamStatus: number | null;
}

const INFO = 30;
/** A path longer than this is cut (and marked): a client must not make each of its lines kilobytes long. */
export const PATH_CHARS = 512;

/** Path and query length of a request target, the path cut at PATH_CHARS. */
export function targetParts(url: string): { path: string; queryLength: number } {
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  return { path: path.length > PATH_CHARS ? `${path.slice(0, PATH_CHARS)}…` : path, queryLength: q === -1 ? 0 : url.length - q - 1 };
}

/** A writer of access lines for `log`; lines are written only while `log` is at info or below. */
export function accessLogWriter(log: Logger): (r: AccessRecord) => void {
  const stream = (log as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as
    | { write(line: string): unknown; flushSync?: () => void; [k: symbol]: unknown }
    | undefined;
  // People read pretty lines at a person's pace: pino writes the sentence, no fast path needed.
  if (stream?.[HUMAN_DESTINATION] === true) return (r) => log.info(sentence(r));
  // Streams that want pino's metadata (multistream) get the line from pino itself.
  if (stream === undefined || stream[pino.symbols.needsMetadataGsym] === true) {
    return (r) => log.info(r, 'request');
  }
  const symbols = log as unknown as Record<symbol, unknown>;
  // Bindings of the logger and its parents (`,"pid":1,"worker":2`), already serialized by pino.
  const bindings = (symbols[pino.symbols.chindingsSym] as string | undefined) ?? '';
  // pino's own pieces: `,"time":...` as log.time asks, and the level as log.levelNames asks.
  const time = symbols[pino.symbols.timeSym] as () => string;
  const levelFormatter = (symbols[pino.symbols.formattersSym] as { level?: (label: string, n: number) => object } | undefined)?.level;
  const level = levelFormatter ? JSON.stringify(levelFormatter('info', INFO)).slice(1, -1) : `"level":${INFO}`;
  // The lines of one event-loop turn go to the destination as one write. pino's destination
  // (sonic-boom) measures the UTF-8 length of the text it holds on every write, which flattens
  // that text anew each time: a line per write cost about 5.5 KiB of garbage per request in the
  // bench's heap profile, a turn's lines per write cost it once. A line waits at most that turn.
  let batch: string[] = [];
  let scheduled = false;
  const flush = (): void => {
    if (!scheduled) return;
    scheduled = false;
    unflushed.delete(flush);
    const lines = batch;
    batch = [];
    stream.write(lines.length === 1 ? lines[0]! : lines.join(''));
  };
  return (r) => {
    if (log.levelVal > INFO) return;
    if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
      holdUntilExit(flush, stream);
    }
    batch.push(
      `{${level}${time()}${bindings},"reqId":"${r.reqId}","client":${text(r.client)},"host":${text(r.host)},"method":${text(r.method)},"path":${text(r.path)},"queryLength":${r.queryLength},` +
        `"tenant":${plain(r.tenant)},"sub":${text(r.sub)},"route":${plain(r.route)},"status":${r.status},"upstreamStatus":${r.upstreamStatus},"code":${plain(r.code)},` +
        `"bytesIn":${r.bytesIn},"bytesOut":${r.bytesOut},"ms":${r.ms},"broker":${r.broker === null ? null : text(redactUserInfo(r.broker))},"proto":${text(r.proto)},"trace":${text(r.trace)},"msg":"request"}\n`,
    );
  };
}

/** Writers holding lines of the turn in progress: a process that exits first (a second signal, a fatal error) still writes them. */
const unflushed = new Map<() => void, { flushSync?: () => void }>();
let exitHooked = false;

function holdUntilExit(flush: () => void, stream: { flushSync?: () => void }): void {
  unflushed.set(flush, stream);
  if (exitHooked) return;
  exitHooked = true;
  process.once('exit', () => {
    for (const [pending, dest] of unflushed) {
      pending();
      try {
        // pino's own exit flush of the destination ran already (it was registered first).
        dest.flushSync?.();
      } catch {
        // A destination closed or mid-write at exit: what it took is all that can be written.
      }
    }
  });
}

/** The request as one line a person reads: `client method host/path status ... tenant route`. */
function sentence(r: AccessRecord): string {
  const query = r.queryLength > 0 ? `?(${r.queryLength} chars)` : '';
  const upstream = r.upstreamStatus === null ? '' : ` (broker ${r.upstreamStatus})`;
  return (
    `${r.client} ${r.method} ${r.host}${r.path}${query} → ${r.status}${r.code ? ` ${r.code}` : ''}${upstream} ${r.ms} ms ` +
    `in ${r.bytesIn} B out ${r.bytesOut} B tenant ${r.tenant ?? '-'} route ${r.route ?? '-'} HTTP/${r.proto} ${r.reqId}`
  );
}

function plain(v: string | null): string {
  return v === null ? 'null' : `"${v}"`;
}

function text(v: string | null): string {
  return v === null ? 'null' : JSON.stringify(v);
}
