/**
 * HTTP/2 load from h2load (Debian's nghttp2-client, a C client: it takes far less CPU per request
 * than a Node client would, leaving the cores to the proxy), with per-request latencies from its
 * --log-file in microseconds. Browsers speak h2, so the edge's cost over h2 streams matters as much
 * as over HTTP/1.1 connections.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LoadResult, Workload } from './load.js';
import { hasCommand } from './procs.js';

/** How to get h2load when it is missing. */
export const H2LOAD_HINT = 'h2load not found: install it with `sudo apt-get install -y nghttp2-client` (Debian/Ubuntu) to run the HTTP/2 scenarios';

/** How long h2load may run past its duration, finishing the streams it started, before it is killed. */
const H2LOAD_GRACE_S = 30;

/** True when h2load is on the PATH. */
export function h2loadAvailable(): boolean {
  return hasCommand('h2load');
}

/** How an h2 load run is shaped: `clients` connections, each with `streams` concurrent streams. */
export interface H2Shape {
  readonly clients: number;
  readonly streams: number;
  readonly seconds: number;
  readonly headers: Record<string, string>;
}

/** Runs `workload` against `base` (https) over h2 for `seconds`; the warm-up is a separate call. */
export async function runH2Load(base: string, workload: Workload, shape: H2Shape): Promise<LoadResult> {
  const dir = await mkdtemp(join(tmpdir(), 'queen-edge-h2load-'));
  try {
    const logFile = join(dir, 'requests.log');
    const args = [
      '-c',
      String(shape.clients),
      '-m',
      String(shape.streams),
      '-t',
      '1',
      '-D',
      `${Math.max(1, Math.round(shape.seconds))}`,
      '--log-file',
      logFile,
    ];
    for (const [k, v] of Object.entries(shape.headers)) args.push('-H', `${k}: ${v}`);
    if (workload.body) {
      const bodyFile = join(dir, 'body.json');
      await writeFile(bodyFile, workload.body);
      args.push('-d', bodyFile, '-H', 'content-type: application/json');
    }
    args.push(`${base}${workload.path}`);
    const stdout = await new Promise<string>((resolve, reject) => {
      const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
      // h2load waits for every stream it started: a proxy that leaves one hanging would hang the bench.
      const watchdog = setTimeout(() => child.kill('SIGKILL'), (shape.seconds + H2LOAD_GRACE_S) * 1000);
      child.once('exit', () => clearTimeout(watchdog));
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (out += c.toString()));
      child.once('error', reject);
      child.once('exit', (code, signal) =>
        code === 0
          ? resolve(out)
          : reject(
              new Error(
                `h2load ${signal === 'SIGKILL' ? `still running ${H2LOAD_GRACE_S} s after its duration: streams left unanswered` : `exited with ${code}`}:\n${out}`,
              ),
            ),
      );
    });
    return parseH2Load(stdout, await readFile(logFile, 'utf8'), shape.seconds, workload.expectStatus);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Turns h2load's summary and per-request log (start µs, status, duration µs per line) into a LoadResult. */
export function parseH2Load(stdout: string, log: string, seconds: number, expectStatus: number): LoadResult {
  const latencies: number[] = [];
  const statusCounts: Record<string, number> = {};
  for (const line of log.split('\n')) {
    const cols = line.split('\t');
    if (cols.length < 3) continue;
    const status = cols[1]!;
    statusCounts[status] = (statusCounts[status] ?? 0) + 1;
    latencies.push(Number(cols[2]) / 1000);
  }
  const sorted = Float64Array.from(latencies).sort();
  const at = (q: number) => (sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!);
  const m = /requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/.exec(stdout);
  const requests = latencies.length;
  return {
    requests,
    seconds,
    reqPerSec: requests / seconds,
    p50Ms: at(0.5),
    p99Ms: at(0.99),
    p999Ms: at(0.999),
    errors: m ? Number(m[2]) : 0,
    timeouts: m ? Number(m[3]) : 0,
    unexpected: requests - (statusCounts[String(expectStatus)] ?? 0),
    statusCounts,
  };
}
