/**
 * Three real edge processes (the CLI, one worker each) sharing one Redis or Redis Cluster, and an
 * open-loop load generator that offers a fixed request rate spread over them and records every
 * reply (status, latency, the RateLimit-Policy it carried). Test helper for the many-instance and
 * failover suites.
 */
import { Pool, request } from 'undici';
import { TEST_PLAN, TEST_SECRET } from '../helpers/edge.js';
import { spawnEdge, type EdgeProcess, type LogLine } from '../deploy/edge-process.js';
import { ADMIN_TOKEN } from '../admin/admin-call.js';
import { waitFor } from '../helpers/wait.js';

/** One edge process and where it listens. */
export interface TrioEdge {
  readonly proc: EdgeProcess;
  readonly httpsPort: number;
  readonly adminPort: number;
  readonly pool: Pool;
}

/** Where the edges find Redis: a URL or Cluster seeds. */
export type RedisTarget = { url: string } | { cluster: string[] };

/** Starts three edges on `redis` with the given plans and tenants (each tenant served by `broker`). */
export async function startTrio(opts: {
  redis: RedisTarget;
  keyPrefix: string;
  failMode?: 'open' | 'closed' | 'local';
  timeoutMs?: number;
  plans: Record<string, unknown>;
  tenants: Record<string, string>;
  broker: string;
}): Promise<TrioEdge[]> {
  // One broker for all: declared tenancy-aware, as a shared broker must be.
  const tenants = Object.fromEntries(
    Object.entries(opts.tenants).map(([id, plan]) => [id, { plan, hosts: [`${id}.localhost`], brokers: [opts.broker], tenancyAwareBrokers: true }]),
  );
  // A start that fails part way kills what it started: an edge left running after its test ends
  // outlives the Redis it was given.
  const started = await Promise.allSettled(
    [0, 1, 2].map(async () => {
      // Port 0, read back from the edge's own log: a port picked free beforehand may be taken by
      // another process on a busy machine before the edge binds it.
      const proc = await spawnEdge({
        server: {
          https: { host: '127.0.0.1', port: 0 },
          admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
          workers: 1,
          drainTimeoutMs: 1000,
        },
        // info: the access lines carry the edge's own time of each decision (the tests count by it).
        log: { level: 'info' },
        redis: { url: null, cluster: [], ...opts.redis, keyPrefix: opts.keyPrefix, failMode: opts.failMode ?? 'local', timeoutMs: opts.timeoutMs ?? 200 },
        auth: { secret: TEST_SECRET },
        // The broker double shares the test's process with the load generator: on a busy machine
        // its health answers come late, and a broker marked down would answer 503 for reasons
        // these suites are not about.
        upstream: { healthIntervalMs: 1000, healthTimeoutMs: 5000, downAfter: 5 },
        plans: { test: TEST_PLAN, ...opts.plans },
        tenants,
      });
      let listening: LogLine;
      try {
        // A start under tsx takes seconds on an idle machine and far more on a loaded one; an edge
        // that exits instead fails at once, with its stderr.
        listening = await Promise.race([
          proc.waitForLog((l) => l.msg === 'queen-edge listening', 45_000),
          proc.exited.then((e) => Promise.reject(new Error(`edge exited (${e.code ?? e.signal}) before listening: ${proc.stderr()}`))),
        ]);
      } catch (err) {
        await proc.kill();
        throw err;
      }
      const httpsPort = (listening.https as { port: number }).port;
      const adminPort = (listening.admin as { port: number }).port;
      const edge: TrioEdge = {
        proc,
        httpsPort,
        adminPort,
        pool: new Pool(`https://127.0.0.1:${httpsPort}`, {
          connections: 16,
          connect: { rejectUnauthorized: false },
          headersTimeout: 10_000,
          bodyTimeout: 10_000,
        }),
      };
      return edge;
    }),
  );
  const edges = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  try {
    const failed = started.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    await Promise.all(
      edges.map((e) => waitFor(async () => (await adminCall(e, 'GET', '/readyz').catch(() => 0)) === 200, 30_000, `edge on ${e.httpsPort} ready`)),
    );
  } catch (err) {
    await stopTrio(edges);
    throw err;
  }
  return edges;
}

/** Stops the edges with SIGTERM, so each drains and flushes its last usage counts; then closes the pools. */
export async function stopTrio(edges: readonly TrioEdge[]): Promise<void> {
  await Promise.all(
    edges.map(async (e) => {
      await e.pool.close().catch(() => {});
      if (e.proc.child.exitCode === null && e.proc.child.signalCode === null) {
        e.proc.child.kill('SIGTERM');
        await Promise.race([e.proc.exited, new Promise((r) => setTimeout(r, 10_000))]);
      }
      await e.proc.kill();
    }),
  );
}

/** One reply (status 0: no reply within the pool's timeouts, or a transport error). */
export interface Sample {
  readonly edge: number;
  readonly sentAt: number;
  /** When the reply was read: close to when the edge decided, since the broker answers at once. */
  readonly doneAt: number;
  readonly ms: number;
  readonly status: number;
  readonly code: string | undefined;
  readonly policy: string | undefined;
}

/** An HTTP request to one edge as `tenant`, recorded as a Sample. */
export async function send(
  edges: readonly TrioEdge[],
  i: number,
  tenant: string,
  jwt: string,
  path: string,
  opts: { method?: 'GET' | 'POST'; body?: unknown; signal?: AbortSignal } = {},
): Promise<Sample> {
  const sentAt = Date.now();
  const { method = 'GET', body, signal } = opts;
  try {
    const res = await edges[i]!.pool.request({
      method,
      path,
      signal,
      headers: { host: `${tenant}.localhost`, authorization: `Bearer ${jwt}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.body.text();
    let code: string | undefined;
    if (res.statusCode >= 400) code = (JSON.parse(text) as { code?: string }).code;
    const policy = res.headers['ratelimit-policy'];
    const doneAt = Date.now();
    return { edge: i, sentAt, doneAt, ms: doneAt - sentAt, status: res.statusCode, code, policy: typeof policy === 'string' ? policy : undefined };
  } catch {
    const doneAt = Date.now();
    return { edge: i, sentAt, doneAt, ms: doneAt - sentAt, status: 0, code: undefined, policy: undefined };
  }
}

/**
 * Offers `ratePerSec` requests per second, round-robin over the edges, until `until()` is true;
 * open loop (a slow reply does not slow the offer). Resolves with every reply.
 */
export async function offer(
  edges: readonly TrioEdge[],
  ratePerSec: number,
  until: () => boolean,
  request: (edge: number, n: number) => Promise<Sample>,
): Promise<Sample[]> {
  const inflight: Promise<Sample>[] = [];
  const start = Date.now();
  let n = 0;
  while (!until()) {
    const due = Math.floor(((Date.now() - start) * ratePerSec) / 1000);
    for (; n < due; n++) inflight.push(request(n % edges.length, n));
    await new Promise((r) => setTimeout(r, 5));
  }
  return Promise.all(inflight);
}

/** An admin API call to one edge; resolves with the status. */
export async function adminCall(edge: TrioEdge, method: 'POST' | 'PUT' | 'GET', path: string): Promise<number> {
  const res = await request(`http://127.0.0.1:${edge.adminPort}${path}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  await res.body.dump();
  return res.statusCode;
}

/**
 * The access-log lines of `tenant` on every edge, by the edge's own time of arrival (line time
 * minus duration): close to when the limiter decided, however late the test reads the reply.
 */
export function accessLines(edges: readonly TrioEdge[], tenant: string): Array<{ edge: number; time: number; ms: number; status: number }> {
  return edges
    .flatMap((e, edge) =>
      e.proc.lines
        .filter((l) => l.msg === 'request' && l.tenant === tenant)
        .map((l) => ({ edge, time: Number(l.time) - Number(l.ms), ms: Number(l.ms), status: Number(l.status) })),
    )
    .sort((a, b) => a.time - b.time);
}
