/**
 * The admin listener's probes (docs/operating.md): `/livez` answers while the process runs, `/readyz`
 * while it should receive traffic.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export interface Readiness {
  /** null when ready, else the reason. */
  notReadyReason(): string | null;
}

function json(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), 'cache-control': 'no-store' });
  res.end(text);
}

/** Answers a probe; returns false when the path is not a probe. */
export function answerProbe(req: IncomingMessage, res: ServerResponse, readiness: Readiness): boolean {
  const path = (req.url ?? '/').split('?', 1)[0];
  if (path === '/livez') {
    json(res, 200, { status: 'ok' });
    return true;
  }
  if (path === '/readyz') {
    const reason = readiness.notReadyReason();
    json(res, reason === null ? 200 : 503, reason === null ? { status: 'ready' } : { status: 'not_ready', reason });
    return true;
  }
  return false;
}
