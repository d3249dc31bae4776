/**
 * Load from autocannon's programmatic API, with latencies kept in microseconds: autocannon's own
 * histogram records whole milliseconds, too coarse for a proxy that adds fractions of one.
 */
import autocannon from 'autocannon';

/** One kind of request the load generator repeats. */
export interface Workload {
  readonly name: string;
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly body: Buffer | null;
  /** The status every answer must have. */
  readonly expectStatus: number;
}

/** What one measured run produced. */
export interface LoadResult {
  requests: number;
  seconds: number;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  p999Ms: number;
  errors: number;
  timeouts: number;
  /** Answers with a status other than the workload's. */
  unexpected: number;
  statusCounts: Record<string, number>;
}

/** Runs `workload` against `base` for `seconds` with `connections` keep-alive HTTP/1.1 connections. */
export function runLoad(
  base: string,
  workload: Workload,
  opts: { connections: number; seconds: number; headers: Record<string, string> },
): Promise<LoadResult> {
  const latencies: number[] = [];
  const statusCounts: Record<string, number> = {};
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...opts.headers };
    if (workload.body) headers['content-type'] = 'application/json';
    const instance = autocannon(
      {
        url: `${base}${workload.path}`,
        connections: opts.connections,
        duration: opts.seconds,
        pipelining: 1,
        method: workload.method,
        headers,
        ...(workload.body ? { body: workload.body } : {}),
        timeout: 10,
      },
      (err, result) => {
        if (err) return reject(err);
        const sorted = Float64Array.from(latencies).sort();
        const at = (q: number) => (sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!);
        const requests = latencies.length;
        resolve({
          requests,
          seconds: result.duration,
          reqPerSec: requests / result.duration,
          p50Ms: at(0.5),
          p99Ms: at(0.99),
          p999Ms: at(0.999),
          errors: result.errors,
          timeouts: result.timeouts,
          unexpected: requests - (statusCounts[String(workload.expectStatus)] ?? 0),
          statusCounts,
        });
      },
    );
    instance.on('response', (_client, statusCode, _bytes, responseTimeMs) => {
      latencies.push(responseTimeMs);
      const k = String(statusCode);
      statusCounts[k] = (statusCounts[k] ?? 0) + 1;
    });
  });
}
