/**
 * The access log: one JSON line per request, in pino's own line format, on the process logger's
 * destination (docs/decisions/0009-access-log-line.md). The line has a fixed shape, so it is built
 * directly instead of through pino's generic serializer, which cost 8 µs per request in the bench
 * profile (a walk over the object's keys with a stringify per value); values that may hold any
 * character go through JSON.stringify, the rest are plain by construction.
 */
import { pino, type Logger } from 'pino';

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
  /** A broker URL from the configuration. */
  readonly broker: string | null;
  readonly proto: string;
  /** The trace id part of a traceparent: client input. */
  readonly trace: string | null;
}

const INFO = 30;

/** A writer of access lines for `log`; lines are written only while `log` is at info or below. */
export function accessLogWriter(log: Logger): (r: AccessRecord) => void {
  const stream = (log as unknown as Record<symbol, unknown>)[pino.symbols.streamSym] as { write(line: string): unknown; [k: symbol]: unknown } | undefined;
  // Streams that want pino's metadata (multistream) get the line from pino itself.
  if (stream === undefined || stream[pino.symbols.needsMetadataGsym] === true) {
    return (r) => log.info(r, 'request');
  }
  // Bindings of the logger and its parents (`,"pid":1,"worker":2`), already serialized by pino.
  const bindings = (log as unknown as Record<symbol, string>)[pino.symbols.chindingsSym] ?? '';
  return (r) => {
    if (log.levelVal > INFO) return;
    stream.write(
      `{"level":30,"time":${Date.now()}${bindings},"reqId":"${r.reqId}","tenant":${plain(r.tenant)},"sub":${text(r.sub)},"route":${plain(r.route)},` +
        `"method":${text(r.method)},"status":${r.status},"code":${plain(r.code)},"bytesIn":${r.bytesIn},"bytesOut":${r.bytesOut},"ms":${r.ms},` +
        `"broker":${text(r.broker)},"proto":${text(r.proto)},"trace":${text(r.trace)},"msg":"request"}\n`,
    );
  };
}

function plain(v: string | null): string {
  return v === null ? 'null' : `"${v}"`;
}

function text(v: string | null): string {
  return v === null ? 'null' : JSON.stringify(v);
}
