/** Each stage of the request path alone, without a socket: a fake request and response, parts built from plain objects. */
import { describe, expect, it } from 'vitest';
import type { Identity } from '../../src/auth/jwt.js';
import { BodyBudget } from '../../src/body/budget.js';
import { BodyPace } from '../../src/body/pace.js';
import { edgeError, isEdgeError } from '../../src/errors.js';
import { HeadsInFlight } from '../../src/limits/heads-in-flight.js';
import type { Admission, Limiter } from '../../src/limits/limiter.js';
import type { EdgeRequest, EdgeResponse } from '../../src/listen/servers.js';
import { createClientAddresses } from '../../src/net/client-address.js';
import { Exchange } from '../../src/pipeline/exchange.js';
import * as S from '../../src/pipeline/stages.js';
import { ANSWERED, CONTINUE, type Parts } from '../../src/pipeline/stages.js';
import { compileRoutes } from '../../src/routes/match.js';
import { ROUTES, type RouteSpec } from '../../src/routes/table.js';
import { compilePlan, compileTenant, type Tenant } from '../../src/tenants/model.js';
import { Tenancy } from '../../src/tenants/tenancy.js';
import type { ProxyRequest } from '../../src/upstream/proxy.js';
import { pipelineSettings } from '../../src/pipeline.js';
import { testConfig } from '../helpers/edge.js';

const plan = compilePlan('p', {
  features: [],
  limits: { requestsPerSec: 1, requestBurst: 2, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1024, maxBatch: 3 },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 0,
});
const acme = compileTenant(
  'acme',
  {
    status: 'active',
    plan: 'p',
    hosts: ['acme.example'],
    brokers: ['http://127.0.0.1:1'],
    cors: { origins: ['https://app.example'] },
    boundedLoadFactor: null,
  },
  plan,
);
const identity = (roles: string[], tenant: string | null = 'acme'): Identity => ({
  token: 't',
  sub: 's',
  roles: new Set(roles),
  tenant,
  expMs: null,
  claims: {},
});
const routeNamed = (name: string): RouteSpec => ROUTES.find((r) => r.name === name)!;
const ADMITTED: Admission = { refusal: null, headers: null, release: null };

interface Fakes {
  admit?: Limiter['admit'];
  preAdmit?: Limiter['preAdmit'];
  storageBlocked?: boolean;
  forwarded?: ProxyRequest[];
}

function parts(f: Fakes = {}): Parts {
  const tenants = {
    byId: (id: string) => (id === 'acme' ? acme : undefined),
    byHost: (h: string) => (h === 'acme.example' ? acme : undefined),
    storageUsed: () => undefined,
    all: () => [acme],
  };
  const verifiers = { global: { cached: () => undefined, verify: async () => edgeError('unauthorized', 'bad token') } } as never;
  const limiter = { preAdmit: f.preAdmit ?? (() => null), admit: f.admit ?? (() => ADMITTED) } as unknown as Limiter;
  return {
    settings: pipelineSettings(testConfig(['http://127.0.0.1:1'])),
    routes: compileRoutes(ROUTES),
    tenants,
    tenancy: new Tenancy(tenants, verifiers, { defaultTenant: null, tenantClaim: 'tenant' }),
    storageBlocked: () => f.storageBlocked ?? false,
    verifiers,
    apiKeys: { cached: () => undefined, verify: async () => edgeError('unauthorized', 'bad key') } as never,
    limiter,
    clientLimits: { signatureGate: () => null, publicRequest: async () => null } as never,
    clientAddresses: createClientAddresses([]),
    bodyPace: new BodyPace({ graceMs: 2000, minBytesPerSec: 16384 }, 500),
    bodyBudget: new BodyBudget(4096, 8192),
    headsInFlight: new HeadsInFlight(),
    proxy: {
      reachable: () => true,
      forward: async (_res: EdgeResponse, _x: unknown, _t: Tenant, req: ProxyRequest) => {
        f.forwarded?.push(req);
        return null;
      },
    } as never,
    minter: null,
    tracing: null,
    usage: { record: () => {} } as never,
    metrics: { request: () => {}, parked: () => {} },
    log: { warn: () => {} } as never,
    clock: Date.now,
  };
}

function exchange(
  head: { method?: string; url?: string; headers?: Record<string, string>; raw?: string[] } = {},
  tenant: Tenant | null = acme,
): Exchange & { answer: { status: number; headers: unknown } | null } {
  const headers = { host: 'acme.example', ...head.headers };
  const req = {
    method: head.method ?? 'GET',
    url: head.url ?? '/api/v1/resources/queues',
    headers,
    rawHeaders: head.raw ?? Object.entries(headers).flat(),
    socket: null,
    httpVersion: '1.1',
  } as unknown as EdgeRequest;
  const answer = null as { status: number; headers: unknown } | null;
  const res = {
    headersSent: false,
    destroyed: false,
    once: () => res,
    writeHead: (status: number, h: unknown) => {
      x.answer = { status, headers: h };
      return res;
    },
    end: () => res,
    writeContinue: () => {},
  } as unknown as EdgeResponse;
  const x = Object.assign(new Exchange(req, res, 0, { record: () => {} } as never), { answer });
  x.tenant = tenant;
  return x;
}

describe('prelude stages', () => {
  it('singleHeaders refuses a second Host or Authorization', () => {
    expect(S.singleHeaders(exchange({ raw: ['Host', 'a', 'host', 'b'] }))).toMatchObject({ code: 'invalid_request' });
    expect(S.singleHeaders(exchange({ raw: ['Authorization', 'a', 'authorization', 'b'] }))).toMatchObject({ code: 'unauthorized' });
    expect(S.singleHeaders(exchange())).toBe(CONTINUE);
  });

  it("hostTenant finds the host's tenant without the port", () => {
    const x = exchange({ headers: { host: 'ACME.example:8443' } });
    expect(S.hostTenant(x, parts())).toBe(CONTINUE);
    expect([x.host, x.hostTenant]).toEqual(['acme.example', acme]);
  });

  it('cors answers an allowed preflight itself and refuses a disallowed origin', () => {
    const p = parts();
    const pre = exchange({ method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
    S.hostTenant(pre, p);
    expect(S.cors(pre, p)).toBe(ANSWERED);
    expect(pre.answer?.status).toBe(204);
    const other = exchange({ headers: { origin: 'https://evil.example' } });
    S.hostTenant(other, p);
    expect(S.cors(other, p)).toMatchObject({ code: 'forbidden' });
  });

  it('route matches tenant routes only', () => {
    const x = exchange({ url: '/api/v1/pop/queue/q?wait=true' });
    expect(S.route(x, parts())).toBe(CONTINUE);
    expect([x.route?.name, x.params.queue, x.target.query]).toEqual(['pop.queue', 'q', 'wait=true']);
    expect(S.route(exchange({ url: '/nowhere' }), parts())).toMatchObject({ code: 'route_not_found' });
  });
});

describe('public route stages', () => {
  it("publicTenant needs the host's (or default) tenant; noBody refuses a body; health answers 200", () => {
    expect(S.publicTenant(exchange())).toMatchObject({ code: 'route_not_found' });
    expect(S.noBody(exchange({ headers: { 'content-length': '3' } }))).toMatchObject({ code: 'invalid_request' });
    const x = exchange();
    x.openTenant = acme;
    expect(S.publicTenant(x)).toBe(CONTINUE);
    expect(S.health(x, parts())).toBe(ANSWERED);
    expect(x.answer?.status).toBe(200);
  });
});

describe('tenant stages', () => {
  it('authenticate refuses a request without a bearer token, and a token the verifier refuses', async () => {
    expect(await S.authenticate(exchange(), parts())).toMatchObject({ code: 'unauthorized', message: 'missing bearer token' });
    expect(await S.authenticate(exchange({ headers: { authorization: 'Bearer a.b.c' } }), parts())).toMatchObject({
      code: 'unauthorized',
      message: 'bad token',
    });
  });

  it('actingTenant meters from here, only for a token that fits', () => {
    const x = exchange({}, null);
    x.candidate = acme;
    x.identity = identity(['queen-rw'], 'globex');
    expect(S.actingTenant(x, parts())).toMatchObject({ code: 'forbidden' });
    expect(x.tenant).toBeNull();
    x.identity = identity(['queen-rw']);
    expect(S.actingTenant(x, parts())).toBe(CONTINUE);
    expect(x.tenant).toBe(acme);
  });

  it("authorize and gates: the role set against the route, then the plan's features", () => {
    const x = exchange();
    x.route = routeNamed('push');
    x.identity = identity([]);
    expect(S.authorize(x)).toMatchObject({ code: 'forbidden' });
    x.identity = identity([...(x.route.access as readonly string[])]);
    expect(S.authorize(x)).toBe(CONTINUE);
    x.route = ROUTES.find((r) => r.feature !== null)!;
    expect(S.gates(x)).toMatchObject({ code: 'feature_gated' });
  });

  it('query caps against the plan; contentEncoding refuses a coded body', () => {
    const x = exchange();
    x.route = routeNamed('pop.queue');
    x.target = { path: '/api/v1/pop/queue/q', query: 'batch=9' };
    expect(S.query(x, parts())).toMatchObject({ code: 'invalid_request' });
    x.target = { path: '/api/v1/pop/queue/q', query: 'batch=2&wait=true' };
    expect(S.query(x, parts())).toBe(CONTINUE);
    expect(x.query?.wait).toBe(true);
    expect(x.query?.forward).toContain('batch=2');
    expect(S.contentEncoding(exchange({ headers: { 'content-encoding': 'gzip' } }))).not.toBe(CONTINUE);
  });

  it('preAdmit and headsInFlight hold the head until admit, or the end: released once either way', () => {
    const p = parts({ preAdmit: () => ({ refusal: null, headers: null, release: () => released.push('pre') }) });
    const released: string[] = [];
    const ended = exchange();
    ended.query = { values: new Map(), wait: false, timeoutMs: 0, forward: '' };
    S.preAdmit(ended, p);
    S.headsInFlight(ended, p);
    expect(p.headsInFlight.count('acme')).toBe(1);
    ended.end();
    ended.end();
    expect([released, p.headsInFlight.count('acme')]).toEqual([['pre'], 0]);
    const full = exchange();
    full.query = ended.query;
    const heads = [p.headsInFlight.enter('acme', 2), p.headsInFlight.enter('acme', 2)];
    S.preAdmit(full, p);
    expect(S.headsInFlight(full, p)).toMatchObject({ code: 'rate_limited' });
    expect(released).toEqual(['pre', 'pre']);
    for (const h of heads) h?.();
  });

  it('body streams a declared body on a stream route, refuses a push over the body limit before reading it, reads nothing without a body', async () => {
    const stream = exchange({ method: 'POST', headers: { 'content-length': '10' } });
    stream.route = ROUTES.find((r) => r.body === 'stream' && r.methods.includes('POST'))!;
    expect(await S.body(stream, parts())).toBe(CONTINUE);
    expect([stream.streamed, stream.bodyLength]).toEqual([true, 10]);
    const big = exchange({ method: 'POST', headers: { 'content-length': '2000' } });
    big.route = routeNamed('push');
    expect(await S.body(big, parts())).toMatchObject({ code: 'payload_too_large' });
    const none = exchange();
    none.route = routeNamed('pop.queue');
    expect(await S.body(none, parts())).toBe(CONTINUE);
    expect(none.body).toBeNull();
  });

  it('storage refuses writes while blocked; a transaction that pushes nothing passes', () => {
    const x = exchange();
    x.route = routeNamed('push');
    expect(S.storage(x, parts({ storageBlocked: true }))).toMatchObject({ code: 'storage_quota_exceeded' });
    x.route = routeNamed('transaction');
    expect(S.storage(x, parts({ storageBlocked: true }))).toBe(CONTINUE);
  });

  it('admit ends the head, holds the parked slot until the end, and renders a refusal with its headers', async () => {
    const slots: string[] = [];
    const x = exchange();
    x.query = { values: new Map(), wait: true, timeoutMs: 1000, forward: 'wait=true' };
    let headEnded = false;
    x.holdHead(() => {
      headEnded = true;
    });
    expect(await S.admit(x, parts({ admit: async () => ({ refusal: null, headers: { ratelimit: 'r' }, release: () => slots.push('slot') }) }))).toBe(CONTINUE);
    expect([headEnded, x.limit, x.headers.ratelimit, slots]).toEqual([true, 'admitted', 'r', []]);
    x.end();
    expect(slots).toEqual(['slot']);
    const refused = exchange();
    refused.query = x.query;
    const r = await S.admit(
      refused,
      parts({ admit: () => ({ refusal: edgeError('quota_exceeded', 'q', { retryAfterSec: 1 }), headers: { ratelimit: 'q' }, release: null }) }),
    );
    expect(isEdgeError(r) && r.code).toBe('quota_exceeded');
    expect([refused.limit, refused.headers.ratelimit]).toEqual(['quota_exceeded', 'q']);
  });

  it('forward hands the proxy what the stages parsed: the rebuilt query, the lane, the body length', async () => {
    const forwarded: ProxyRequest[] = [];
    const x = exchange({ url: '/api/v1/pop/queue/q' });
    x.route = routeNamed('pop.queue');
    x.params = { queue: 'q' };
    x.target = { path: '/api/v1/pop/queue/q', query: 'batch=2&junk=1' };
    x.identity = identity(['queen-rw']);
    x.query = { values: new Map([['batch', '2']]), wait: false, timeoutMs: 0, forward: 'batch=2' };
    expect(await S.forward(x, parts({ forwarded }))).toBe(ANSWERED);
    expect(forwarded[0]).toMatchObject({ path: '/api/v1/pop/queue/q?batch=2', body: null, parked: false, learnsLease: true });
    expect(forwarded[0]!.headers.authorization).toBe('Bearer t');
  });
});
