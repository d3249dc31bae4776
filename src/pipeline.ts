/**
 * The request path (docs/architecture.md, "The request path"): the stages in pipeline/chain.ts,
 * run on one Exchange per request (pipeline/exchange.ts), each stage calling into the module that
 * owns its decision (pipeline/stages.ts). This file builds the parts once, runs the lists, renders
 * the refusal that ended a request, and writes the one record of each request.
 */
import { performance } from 'node:perf_hooks';
import { BodyBudget } from './body/budget.js';
import { BodyPace, paceTick } from './body/pace.js';
import { edgeError, renderError, type EdgeError } from './errors.js';
import { HeadsInFlight } from './limits/heads-in-flight.js';
import type { EdgeRequest, EdgeResponse, RequestHandler } from './listen/servers.js';
import { clientGone, singleValue } from './listen/transport.js';
import { createClientAddresses } from './net/client-address.js';
import { accessLogWriter, targetParts } from './observability/access-log.js';
import { hostName, Tenancy } from './tenants/tenancy.js';
import { ANSWERED, PRELUDE, runStages, stagesOf, type Ended } from './pipeline/chain.js';
import { endTrace, Exchange } from './pipeline/exchange.js';
import type { Parts, PipelineDeps } from './pipeline/stages.js';

export { pipelineSettings, type PipelineDeps, type PipelineSettings } from './pipeline/stages.js';

export function createPipeline(d: PipelineDeps): RequestHandler {
  const { settings, log } = d;
  const writeAccess = settings.accessLog ? accessLogWriter(log) : null;
  const budget = settings.bodyBudget;
  const parts: Parts = {
    ...d,
    tenancy: new Tenancy(d.tenants, d.verifiers, settings.tenancy),
    clientAddresses: createClientAddresses(settings.trustedProxies),
    bodyBudget: new BodyBudget(budget.perTenantBytes, budget.perProcessBytes),
    bodyPace: new BodyPace(budget, paceTick(budget.graceMs, budget.deadlineMs)),
    headsInFlight: new HeadsInFlight(),
  };

  return (req, res) => {
    let running: Promise<void> | undefined;
    try {
      running = handle(req, res);
    } catch (err) {
      failed(res, err);
      return;
    }
    running?.catch((err: unknown) => failed(res, err));
  };

  /** A bug, never a client's doing: answer 502 if still possible, keep the process alive. */
  function failed(res: EdgeResponse, err: unknown): void {
    log.error({ err }, 'pipeline failure');
    if (!res.headersSent && !clientGone(res)) send(res, null, edgeError('bad_gateway', 'internal error'));
    else res.destroy();
  }

  /**
   * Synchronous until a stage waits, and no async function: each would add a promise, a suspended
   * frame and a microtask turn to every request. Returns the promise of a request still running.
   */
  function handle(req: EdgeRequest, res: EdgeResponse): Promise<void> | undefined {
    const ctx = new Exchange(req, res, d.clock(), d.usage);
    if (d.tracing !== null) ctx.trace = d.tracing.begin(req.headers.traceparent, ctx.startedAt);
    // Whichever comes first: an h2 stream whose small refused body was never read only closes
    // with its session, long after its answer finished. One listener for both, and on() rather
    // than once(): once() wraps each listener in two more objects, and finish() runs once anyway.
    const over = (): void => finish(req, ctx);
    res.on('finish', over);
    res.on('close', over);
    const prelude = runStages(ctx, parts, PRELUDE);
    return prelude instanceof Promise ? prelude.then((ended) => routed(ctx, ended)) : routed(ctx, prelude);
  }

  /** After the prelude: the route's own stages, then the refusal that ended either list, if one did. */
  function routed(ctx: Exchange, prelude: Ended): Promise<void> | undefined {
    if (prelude !== null) return concluded(ctx, prelude);
    const own = runStages(ctx, parts, stagesOf(ctx.route!));
    return own instanceof Promise ? own.then((ended) => concluded(ctx, ended)) : concluded(ctx, own);
  }

  function concluded(ctx: Exchange, ended: Ended): undefined {
    if (ended !== null && ended !== ANSWERED) refuse(ctx, ended);
    return undefined;
  }

  function refuse(ctx: Exchange, err: EdgeError): void {
    ctx.status = err.status;
    ctx.code = err.code;
    // An unread body is not drained when it may be large, or was never sent (100-continue): the
    // connection is closed instead, so refusing a big upload costs no more than refusing a small one.
    if (ctx.closeOnRefusal) ctx.transport.closeAfterResponse(ctx.req, ctx.res, ctx.linger ? settings.lingeringClose : null);
    send(ctx.res, ctx, err);
  }

  /** One access-log line, one metrics observation and one metering record per request, whichever way it ended. */
  function finish(req: EdgeRequest, ctx: Exchange): void {
    if (ctx.done) return;
    ctx.end();
    const durationMs = d.clock() - ctx.startMs;
    ctx.ended();
    d.metrics.request(ctx.tenant?.id ?? null, ctx.route?.name ?? null, ctx.status, ctx.code, performance.now() - ctx.startedAt, ctx.upstreamMs, ctx.limit);
    if (ctx.trace !== null) endTrace(ctx, ctx.trace);
    if (writeAccess === null) return;
    const traceparent = singleValue(req.headers.traceparent);
    const target = targetParts(req.url ?? '');
    writeAccess({
      client: parts.clientAddresses.of(ctx.peer, req.headers['x-forwarded-for']),
      host: hostName(ctx.transport.authority(req)),
      path: target.path,
      queryLength: target.queryLength,
      // The edge's own answers carry a code; a relayed one is the broker's status.
      upstreamStatus: ctx.broker !== null && ctx.code === null && ctx.status !== 0 ? ctx.status : null,
      reqId: ctx.id,
      tenant: ctx.tenant?.id ?? null,
      sub: ctx.identity?.sub ?? null,
      route: ctx.route?.name ?? null,
      method: req.method ?? '',
      status: ctx.status,
      code: ctx.code,
      bytesIn: ctx.bytesIn,
      bytesOut: ctx.bytesOut + ctx.answeredBytes,
      ms: durationMs,
      broker: ctx.broker,
      proto: req.httpVersion,
      trace: traceparent && traceparent.length >= 55 ? traceparent.slice(3, 35) : null,
    });
  }
}

function send(res: EdgeResponse, ctx: Exchange | null, err: EdgeError): void {
  if (res.headersSent || clientGone(res)) return;
  const r = renderError(err);
  res.writeHead(r.status, ctx ? { ...ctx.headers, ...r.headers } : r.headers);
  res.end(r.body);
  if (ctx) ctx.answeredBytes = Buffer.byteLength(r.body);
}
