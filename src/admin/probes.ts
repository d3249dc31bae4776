/**
 * The admin listener's probes (docs/operating.md): `/livez` answers while the process runs, `/readyz`
 * while it should receive traffic.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

export interface Readiness {
  /** null when ready, else the reason. */
  notReadyReason(): string | null;
  /**
   * What works less well while the instance still serves (the durable store away): listed under
   * `degraded` without failing the probe, since taking every instance out of the load balancer
   * would turn degraded into down.
   */
  degraded?(): readonly string[];
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
    const degraded = readiness.degraded?.() ?? [];
    const body = reason === null ? { status: 'ready' } : { status: 'not_ready', reason };
    json(res, reason === null ? 200 : 503, degraded.length > 0 ? { ...body, degraded } : body);
    return true;
  }
  return false;
}
