/**
 * Broker health (docs/clusters.md): active `GET /health` checks on every tracked broker, plus passive
 * signals from the proxied traffic. The verdict is a flag per URL read synchronously on the hot
 * path; everything else (probes, counters, logs, listeners) happens off it.
 */
import { Agent, request } from 'undici';
import type { Logger } from '../observability/log.js';

/** How a proxied request failed; the pipeline maps transport errors to one of these. */
export type FailureKind = 'connect' | 'reset' | 'status5xx' | 'timeout';

/** Probes one broker: resolves true when it is fit for traffic, otherwise false or why not (for the log line); never rejects. */
export type Probe = (url: string, timeoutMs: number) => Promise<boolean | string>;

/**
 * Checks that suspicions start run at most this many times per intervalMs, and never while the
 * periodic check just ran: HAProxy's `fastinter` beside `inter`.
 */
const FAST_CHECKS_PER_INTERVAL = 4;

/** A change of a broker's health, as logged and as given to listeners. */
export interface HealthChange {
  readonly url: string;
  readonly healthy: boolean;
  readonly reason: string;
  /** Clock time of the change (ms). */
  readonly at: number;
}

/** Options of the health checker; the first four are the `upstream:` keys of the config. */
export interface HealthCheckerOptions {
  intervalMs: number;
  timeoutMs: number;
  /** Consecutive failed checks (periodic, or started by a suspicious failure) that mark a broker down. */
  downAfter: number;
  /** Consecutive successful checks that bring a down broker back. */
  upAfter: number;
  /** Replaces the default HTTP probe (tests, other transports). */
  probe?: Probe;
  log: Logger;
  clock?: () => number;
}

/** Health of the brokers of every tenant, shared by all tenants that list the same URL. */
export interface HealthChecker {
  /** Starts watching brokers; a new broker starts healthy (no evidence against it yet). */
  track(urls: Iterable<string>): void;
  /** Stops watching a broker no tenant lists any more. */
  untrack(url: string): void;
  /** Hot path, O(1). An untracked URL is healthy: there is no evidence against it. */
  isHealthy(url: string): boolean;
  /** The last health change of a tracked broker, if it ever changed. */
  lastChange(url: string): HealthChange | undefined;
  /**
   * A proxied request failed. `connect` marks the broker down at once (it refuses connections:
   * waiting for more proof only sends it more requests). `reset`, `status5xx` and `timeout` are
   * suspicions only, since a tenant's own request can end that way on a well broker (a query that
   * outlives the upstream timeout, input the broker answers with 500): each starts a health check
   * now, unless one is running or started less than a quarter of intervalMs ago, and only a failed
   * check counts toward downAfter (docs/clusters.md). The caller does not report the timeout of a
   * long poll.
   */
  reportFailure(url: string, kind: FailureKind): void;
  /**
   * A proxied request succeeded: it breaks a healthy broker's run of failures. A down broker comes
   * back only through active checks, since a reply on an old keep-alive connection does not prove
   * that the broker accepts new ones.
   */
  reportSuccess(url: string): void;
  /** Calls `listener` on every health change; returns the unsubscribe function. */
  onChange(listener: (change: HealthChange) => void): () => void;
  /** Starts the active checks: one round now, then one every intervalMs. */
  start(): void;
  /** Stops the checks and closes the probe connections; probes in flight are dropped. */
  close(): Promise<void>;
}

interface BrokerHealth {
  healthy: boolean;
  failures: number;
  successes: number;
  probing: boolean;
  /** Clock time the last check started, periodic or not. */
  probedAt: number;
  last: HealthChange | undefined;
}

/** A probe over a dedicated undici Agent, and the means to close it. */
export interface HttpProbe {
  readonly probe: Probe;
  close(): Promise<void>;
}

/**
 * The default probe: `GET <url>/health`, healthy on 2xx. It has its own small Agent so probes
 * never queue behind (or take sockets from) proxied traffic, and it opens a fresh connection per
 * check (`reset`), because accepting new connections is exactly what a broker must prove.
 */
export function createHttpProbe(timeoutMs: number): HttpProbe {
  const agent = new Agent({ connections: 1, connectTimeout: timeoutMs, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  const probe: Probe = async (url, timeout) => {
    try {
      const res = await request(`${url}/health`, { dispatcher: agent, reset: true, signal: AbortSignal.timeout(timeout) });
      await res.body.dump();
      return (res.statusCode >= 200 && res.statusCode < 300) || `${res.statusCode} on GET /health`;
    } catch (err) {
      return probeFailure(err, timeout);
    }
  };
  // destroy, not close: a probe still running is moot once the checker stops.
  return { probe, close: () => agent.destroy() };
}

/** Why a probe's request failed, in words an operator reads in the `broker down` line. */
function probeFailure(err: unknown, timeoutMs: number): string {
  const e = err as { name?: string; code?: string; cause?: { code?: string }; message?: string };
  const code = e.code ?? e.cause?.code;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (e.name === 'TimeoutError' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT')
    return `timeout (${timeoutMs} ms)`;
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return 'host not found';
  return code ?? e.message ?? String(err);
}

/** Creates the health checker; call start() to begin the active checks. */
export function createHealthChecker(opts: HealthCheckerOptions): HealthChecker {
  return new ActiveAndPassiveHealth(opts);
}

class ActiveAndPassiveHealth implements HealthChecker {
  readonly #brokers = new Map<string, BrokerHealth>();
  readonly #listeners = new Set<(change: HealthChange) => void>();
  readonly #opts: HealthCheckerOptions;
  readonly #clock: () => number;
  readonly #probe: Probe;
  readonly #ownProbe: HttpProbe | null;
  #timer: NodeJS.Timeout | null = null;
  #closed = false;

  constructor(opts: HealthCheckerOptions) {
    this.#opts = opts;
    this.#clock = opts.clock ?? Date.now;
    this.#ownProbe = opts.probe ? null : createHttpProbe(opts.timeoutMs);
    this.#probe = opts.probe ?? this.#ownProbe!.probe;
  }

  track(urls: Iterable<string>): void {
    for (const url of urls) {
      if (!this.#brokers.has(url)) this.#brokers.set(url, { healthy: true, failures: 0, successes: 0, probing: false, probedAt: -Infinity, last: undefined });
    }
  }

  untrack(url: string): void {
    this.#brokers.delete(url);
  }

  isHealthy(url: string): boolean {
    return this.#brokers.get(url)?.healthy ?? true;
  }

  lastChange(url: string): HealthChange | undefined {
    return this.#brokers.get(url)?.last;
  }

  reportFailure(url: string, kind: FailureKind): void {
    const b = this.#brokers.get(url);
    if (b === undefined) return;
    if (kind === 'connect') {
      b.successes = 0;
      b.failures++;
      if (b.healthy) this.#set(url, b, false, 'connect failure');
      return;
    }
    // Spaced, so a tenant that makes its own requests fail cannot turn them into a probe flood.
    if (b.probing || this.#closed || this.#clock() - b.probedAt < this.#opts.intervalMs / FAST_CHECKS_PER_INTERVAL) return;
    void this.#check(url, b, kind === 'status5xx' ? 'a 5xx answer' : kind === 'reset' ? 'a connection reset' : 'a timeout');
  }

  reportSuccess(url: string): void {
    const b = this.#brokers.get(url);
    if (b?.healthy) b.failures = 0;
  }

  onChange(listener: (change: HealthChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  start(): void {
    if (this.#timer !== null || this.#closed) return;
    this.#round();
    this.#timer = setInterval(() => this.#round(), this.#opts.intervalMs);
    // Health checks alone must not keep the process alive.
    this.#timer.unref();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await this.#ownProbe?.close();
  }

  #round(): void {
    for (const [url, b] of this.#brokers) {
      // A probe slower than the interval is not doubled up: the next round skips that broker.
      if (!b.probing) void this.#check(url, b);
    }
  }

  /** One health check; `after` names the proxied failure that started it, if one did. */
  async #check(url: string, b: BrokerHealth, after?: string): Promise<void> {
    b.probing = true;
    b.probedAt = this.#clock();
    let verdict: boolean | string;
    try {
      verdict = await this.#probe(url, this.#opts.timeoutMs);
    } catch {
      verdict = false;
    }
    b.probing = false;
    // The broker may have been untracked (or the checker closed) while the probe ran.
    if (this.#closed || this.#brokers.get(url) !== b) return;
    if (verdict !== true) {
      const check = after === undefined ? 'health check' : `health check after ${after}`;
      this.#failed(url, b, typeof verdict === 'string' ? `${check} failed: ${verdict}` : `${check} failed`);
      return;
    }
    b.failures = 0;
    if (b.healthy) return;
    b.successes++;
    if (b.successes >= this.#opts.upAfter) this.#set(url, b, true, `${b.successes} consecutive successful health checks`);
  }

  #failed(url: string, b: BrokerHealth, what: string): void {
    b.successes = 0;
    b.failures++;
    if (b.healthy && b.failures >= this.#opts.downAfter) this.#set(url, b, false, `${b.failures} consecutive failures, last: ${what}`);
  }

  #set(url: string, b: BrokerHealth, healthy: boolean, reason: string): void {
    b.healthy = healthy;
    b.failures = 0;
    b.successes = 0;
    const change: HealthChange = Object.freeze({ url, healthy, reason, at: this.#clock() });
    b.last = change;
    if (healthy) this.#opts.log.info({ url, reason }, 'broker up');
    else this.#opts.log.warn({ url, reason }, 'broker down');
    for (const l of this.#listeners) l(change);
  }
}
