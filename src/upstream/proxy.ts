/**
 * The upstream proxy: the one entry point the pipeline calls to send a request to a tenant's
 * brokers. It owns broker choice (lease affinity, then the tenant's ring with health and bounded
 * loads), the retry on a refused connection, passive health reporting, and lease learning from
 * relayed pop answers. Caddy's reverseproxy has the same split: selection, the retry loop and
 * failure counting live inside the proxy; the caller only renders what it returns.
 */
import { performance } from 'node:perf_hooks';
import { edgeError, isEdgeError, type EdgeError } from '../errors.js';
import type { EdgeResponse } from '../listen/servers.js';
import { clientGone } from '../listen/transport.js';
import type { AnswerMeter } from '../metering/answer-meter.js';
import type { AnswerFacts } from '../metering/answer-scan.js';
import type { Logger } from '../observability/log.js';
import type { BrokerChange } from '../tenants/broker-moves.js';
import type { Tenant } from '../tenants/model.js';
import type { Clusters } from './clusters.js';
import { failureError, forwardOnce, type ForwardRequest, type ForwardResult, type RelayRecord } from './forward.js';
import type { BrokerPools } from './pools.js';

/** The broker placement a request asks for (docs/clusters.md): a ring key, or the broker of a lease. */
export interface Lane {
  /** Ring key; null: any healthy broker, round robin. */
  readonly key: string | null;
  /** The lease the request acts on; its broker is preferred when known. */
  readonly leaseId: string | null;
}

/** One request for the proxy: what to send, where it belongs, and how it may wait. */
export interface ProxyRequest extends ForwardRequest {
  readonly lane: Lane;
  /**
   * A `wait=true` pop: it takes the uncapped parked pool, and running out of time is its normal
   * ending, never evidence against the broker, whatever its timeout.
   */
  readonly parked: boolean;
  /** A pop: the relayed answer's leaseId is remembered for the acks that follow. */
  readonly learnsLease: boolean;
}

/** What the proxy tells a traced request (observability/tracing.ts, RequestTrace). */
export interface UpstreamTrace {
  /** Waited for a slot in the tenant's share of a broker's pool since `start` (performance.now()); `ok` false when refused. */
  slotWaited(start: number, broker: string, ok: boolean): void;
  /** An attempt begins: the traceparent the broker gets, or null when the request is not traced. */
  attempt(method: string, broker: string, lane: string | null, parked: boolean): string | null;
  /** The attempt ended: status (0: none), failure, when its response head came (0: never). */
  attempted(status: number, failure: string | null, headersAt: number): void;
}

/** The exchange as the proxy fills it in; the pipeline's request context implements it. */
export interface ProxyExchange extends RelayRecord {
  /** Null unless the request is traced. */
  readonly trace: UpstreamTrace | null;
  /** The broker of the last attempt. */
  broker: string | null;
  /** The relayed answer will be handed to relayed(): hold metering until then. */
  expectBody(): void;
  /** What the relayed answer said (null when none was metered, or it was cut or not JSON). */
  relayed(facts: AnswerFacts | null): void;
  /**
   * Set when the request reached the broker but its answer was not read: the client left before
   * any came back, or it came in a content coding the edge cannot decode.
   */
  answerLost: boolean;
}

/** Sends requests to brokers. */
export interface UpstreamProxy {
  /**
   * Forwards `req` and relays the answer into `res`. Resolves with the refusal the caller must
   * render when no response started (no broker, connect failure, timeout), or null when the
   * answer was relayed or the client left. Never rejects. The exchange gets relayed() exactly
   * once, after the response went out (with the answer's facts when `req.capture` is set).
   */
  forward(res: EdgeResponse, x: ProxyExchange, tenant: Tenant, req: ProxyRequest): Promise<EdgeError | null>;
  /**
   * The directory's broker URLs changed: new ones are probed, and brokers no tenant lists any more
   * are no longer probed, picked or kept connected (see Clusters.follow), in O(changed).
   */
  follow(change: BrokerChange): void;
  /** True while at least one of the tenant's brokers is healthy (what the public health check tells); read-only, no placement. */
  reachable(tenant: Tenant): boolean;
}

export interface ProxyDeps {
  readonly clusters: Clusters;
  readonly pools: BrokerPools;
  readonly log: Logger;
}

/** An attempt that may go to the lane's next broker (nothing was sent). */
const RETRY = Symbol('retry');

/** One forward's metering: settled once relayed() was called, or handed to the meter of an answer, which calls it. */
interface Metering {
  settled: boolean;
}

/** relayed(null), unless the forward's metering is settled already: once, whichever way the forward ends. */
function settle(x: ProxyExchange, m: Metering): void {
  if (m.settled) return;
  m.settled = true;
  x.relayed(null);
}

export function createUpstreamProxy(d: ProxyDeps): UpstreamProxy {
  const { clusters, pools, log } = d;

  /** Lease learning and metering take what the meter read as the answer went past. */
  function afterResponse(x: ProxyExchange, broker: string, meter: AnswerMeter, learnsLease: boolean): void {
    meter.end((outcome) => {
      if (outcome.problem !== null) {
        log.warn(
          { broker, problem: outcome.problem },
          outcome.problem === 'undecodable'
            ? 'metering: answer in a content coding the edge cannot decode; metered from the request'
            : 'metering: answer cut or not JSON; nothing metered from it',
        );
        // Undecodable: the broker acted; its pushes and acks are counted from the request.
        if (outcome.problem === 'undecodable') x.answerLost = true;
      } else if (learnsLease && outcome.facts.leaseId !== null) clusters.learnLease(outcome.facts.leaseId, broker);
      x.relayed(outcome.facts);
    });
  }

  /**
   * No async functions here: each would add a promise, a suspended frame and a microtask turn to
   * every forwarded request. An attempt costs undici's exchange (forwardOnce's promise) and one
   * reaction each for its bookkeeping (send) and for what follows it (tryBroker).
   */
  function forward(res: EdgeResponse, x: ProxyExchange, tenant: Tenant, req: ProxyRequest): Promise<EdgeError | null> {
    // Metering waits for the outcome even when it counts no answer: a transaction whose client left
    // is counted from its request, and only the proxy learns that it was sent (answerLost).
    x.expectBody();
    const metering: Metering = { settled: false };
    try {
      const lane = req.lane;
      const first = (lane.leaseId !== null ? clusters.brokerForLease(tenant, lane.leaseId) : undefined) ?? clusters.pick(tenant, lane.key, null);
      return tryBroker(res, x, tenant, req, first, null, metering);
    } catch (err) {
      settle(x, metering);
      return Promise.reject(err);
    }
  }

  /**
   * Tries `broker`, then the lane's next brokers in ring order while nothing was sent, never after.
   * Whatever way it ends, a throw included (a bug, or a pool undici refuses to open), the exchange
   * gets relayed() once: from the meter when an answer was read, with null otherwise.
   */
  function tryBroker(
    res: EdgeResponse,
    x: ProxyExchange,
    tenant: Tenant,
    req: ProxyRequest,
    broker: string | undefined,
    tried: Set<string> | null,
    metering: Metering,
  ): Promise<EdgeError | null> {
    if (broker === undefined) {
      // Every broker tried refused the connection and is now marked down: none is healthy.
      settle(x, metering);
      return Promise.resolve(edgeError('no_upstream', tried ? 'no broker accepted the connection' : undefined));
    }
    x.broker = broker;
    const failed = (err: unknown): never => {
      settle(x, metering);
      throw err;
    };
    const next = (result: ForwardResult | EdgeError | typeof RETRY): EdgeError | null | Promise<EdgeError | null> => {
      try {
        if (isEdgeError(result)) {
          settle(x, metering);
          return result;
        }
        if (result !== RETRY) {
          // What the broker did is metered from its answer whenever one was read to the end.
          if (result.meter !== null) {
            metering.settled = true;
            afterResponse(x, broker, result.meter, req.learnsLease);
          }
          const judged = judge(res, x, req, broker, result);
          if (judged !== RETRY) {
            settle(x, metering);
            return judged;
          }
        }
        const all = tried ?? new Set<string>();
        all.add(broker);
        return tryBroker(res, x, tenant, req, clusters.pick(tenant, req.lane.key, all), all, metering);
      } catch (err) {
        return failed(err);
      }
    };
    let attempted: Promise<ForwardResult | EdgeError | typeof RETRY>;
    try {
      attempted = attempt(res, x, tenant, req, broker);
    } catch (err) {
      return failed(err);
    }
    return attempted.then(next, failed);
  }

  /** One attempt on `broker`, inside the tenant's share of a shared broker's request pool (parked polls have a pool of their own). */
  function attempt(res: EdgeResponse, x: ProxyExchange, tenant: Tenant, req: ProxyRequest, broker: string): Promise<ForwardResult | EdgeError | typeof RETRY> {
    // Only a tenancy-aware tenant's brokers can be shared (a broker two tenants list is refused
    // otherwise): on a dedicated broker the tenant has the whole pool, with no neighbour to protect.
    const shared = !req.parked && tenant.tenancyAwareBrokers;
    const entered = shared ? pools.enter(broker, tenant.id) : true;
    if (entered === true) return send(res, x, tenant, req, broker, shared);
    const since = x.trace === null ? 0 : performance.now();
    return Promise.resolve(entered).then((granted): ForwardResult | EdgeError | typeof RETRY | Promise<ForwardResult> => {
      x.trace?.slotWaited(since, broker, granted);
      if (!granted) return edgeError('rate_limited', `too many requests in flight to one broker (${pools.tenantCap} at a time)`, { retryAfterSec: 1 });
      // The broker may have left the directory (its pool closed) or gone down during the wait:
      // nothing was sent, so the lane's next broker is tried rather than a pool opened anew.
      if (!clusters.usable(tenant, broker)) {
        pools.leave(broker, tenant.id);
        return RETRY;
      }
      return send(res, x, tenant, req, broker, shared);
    });
  }

  /** Sends on the broker's pool: its count of requests in flight, and the tenant's slot on a shared broker, end with the attempt. */
  function send(res: EdgeResponse, x: ProxyExchange, tenant: Tenant, req: ProxyRequest, broker: string, shared: boolean): Promise<ForwardResult> {
    clusters.begin(broker);
    const over = (): void => {
      clusters.end(broker);
      if (shared) pools.leave(broker, tenant.id);
    };
    let sent: Promise<ForwardResult>;
    try {
      // Each attempt is a client span of its own: the broker joins the one it was sent.
      const traceparent = x.trace === null ? null : x.trace.attempt(req.method, broker, req.lane.key, req.parked);
      if (traceparent !== null) req.headers.traceparent = traceparent;
      sent = forwardOnce(pools.get(broker, req.parked), req, res, x);
    } catch (err) {
      over();
      throw err;
    }
    return sent.then(
      (result) => {
        over();
        x.trace?.attempted(result.status, result.failure, result.headersAt);
        return result;
      },
      (err: unknown) => {
        over();
        throw err;
      },
    );
  }

  /** What an attempt's result means for the broker's health, and whether another broker may be tried. */
  function judge(res: EdgeResponse, x: ProxyExchange, req: ProxyRequest, broker: string, result: ForwardResult): EdgeError | null | typeof RETRY {
    if (result.failure === null) {
      if (result.status >= 500) clusters.reportFailure(broker, 'status5xx');
      else clusters.reportSuccess(broker);
      return null;
    }
    if (result.failure === 'client_aborted') {
      log.debug({ reqId: req.headers['x-request-id'], broker }, 'client went away');
      // Without an answer read to the end, a request that was sent is metered from the request.
      if (result.meter === null && result.sent) x.answerLost = true;
      return null;
    }
    // A parked poll that ran out of time ended the way parked polls end. Other failures are
    // suspicions the health checker confirms with a check of its own (docs/clusters.md).
    if (!(result.failure === 'timeout' && req.parked)) clusters.reportFailure(broker, result.failure === 'protocol' ? 'reset' : result.failure);
    if (result.status !== 0) return null;
    if (result.failure === 'connect' && !result.sent && !clientGone(res)) return RETRY;
    return failureError(result.failure);
  }

  function follow(change: BrokerChange): void {
    clusters.follow(change);
    pools.drop(change.removed);
  }

  return { forward, follow, reachable: (tenant) => clusters.reachable(tenant) };
}
