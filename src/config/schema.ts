/**
 * The configuration contract (README.md, Configuration) as a schema. The documented keys are kept as they are;
 * additions are marked "added". Strict objects, so a typo is reported instead of ignored.
 */
import { jwksUrlRefusal } from '../auth/jwks-url.js';
import { z } from 'zod';
import { invalidProxyRanges } from '../net/client-address.js';

const port = z.number().int().min(0).max(65535);
const host = z.string().min(1);
const url = z.url({ protocol: /^https?$/ });
/**
 * A broker is an origin: each request goes to it with its own path (`/api/v1/…`), and the upstream
 * client (undici) refuses an origin with a path, query or fragment, so such a URL could never
 * serve a request. It is refused here, once, with the reason.
 */
const brokerUrl = url.refine(
  (u) => {
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      // Not a URL at all is the url check's to report.
      return true;
    }
    return parsed.pathname === '/' && parsed.search === '' && parsed.hash === '';
  },
  { message: 'a broker URL is scheme://host[:port] only, without a path, query or fragment: the edge sends each request its own path' },
);
const nonNeg = z.number().int().min(0);
/** Longest host name (RFC 1035 §2.3.4, as text without the trailing dot): longer is never a real name. */
export const MAX_HOST_LENGTH = 253;
/** A trailing dot is not counted. */
const withinHostLength = [
  (h: string): boolean => h.length <= MAX_HOST_LENGTH || (h.length === MAX_HOST_LENGTH + 1 && h.endsWith('.')),
  { message: `a host name is at most ${MAX_HOST_LENGTH} characters` },
] as const;
/** A host name as tenants list it. */
const hostName = z
  .string()
  .min(1)
  .refine(...withinHostLength);

export const ROLE_NAMES = ['read-only', 'write-only', 'read-write', 'admin'] as const;
export const FEATURES = ['streams', 'traces', 'kv', 'timers', 'ephemeral', 'analytics'] as const;
/** What a tenant's brokers register: broker 0.15.1's routes, or every route of the broker contract. */
export const BROKER_VERSIONS = ['0.15.1', 'contract'] as const;

const sniEntry = z.strictObject({
  /** Server name or `*.example.com` pattern. */
  servername: z.string().min(1),
  cert: z.string().min(1),
  key: z.string().min(1),
});

/**
 * Plan limits within ranges the limiter's arithmetic handles exactly (every interval × burst stays
 * below 2^53 ms in Lua doubles, every TTL a valid PEXPIRE): a rate of 1e-300 would make the admit
 * script fail for the tenant on every request.
 */
const RATE_MIN = 0.001;
const RATE_MAX = 1e9;
const BURST_MAX = 1e9;
const limits = z.strictObject({
  requestsPerSec: z.number().min(RATE_MIN).max(RATE_MAX),
  requestBurst: z.number().int().min(1).max(BURST_MAX),
  messagesPerSec: z.number().min(RATE_MIN).max(RATE_MAX),
  messageBurst: z.number().int().min(1).max(BURST_MAX),
  parkedPolls: z.number().int().min(1).max(1_000_000),
  maxPayloadBytes: z
    .number()
    .int()
    .min(1)
    .max(1024 * 1024 * 1024),
  maxBatch: z.number().int().min(1).max(1_000_000),
});

const quotas = z.strictObject({
  messagesPerMonth: nonNeg,
  ingressBytesPerMonth: nonNeg,
});

export const planSchema = z.strictObject({
  features: z.array(z.enum(FEATURES)).default([]),
  limits,
  quotas,
  storageBytes: nonNeg,
  /** added: the share of this plan's tenants' requests traced when no sampled parent decides (docs/observability.md); absent = `tracing.ratio`. */
  traceRatio: z.number().min(0).max(1).optional(),
});

const ALGORITHMS = ['HS256', 'HS384', 'HS512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const;
const algorithms = z.array(z.enum(ALGORITHMS)).min(1);
const claimValue = z.union([z.string(), z.array(z.string())]).nullable();

/** The shortest HMAC secret a tenant's own `auth` may hold: 256 bits, the HS256 key size RFC 7518 §3.2 asks for. */
export const TENANT_SECRET_MIN_BYTES = 32;

/**
 * added: a tenant's own token settings (docs/tenancy.md). When present they replace the global
 * key, issuer and audience for this tenant alone: nothing is inherited but the algorithm
 * allowlist and the roles claim name, so the global key never verifies this tenant's tokens.
 */
export const tenantAuthSchema = z
  .strictObject({
    algorithms: algorithms.optional(),
    /** At least TENANT_SECRET_MIN_BYTES: a tenant's secret is chosen by whoever writes its record, and a short one is guessed offline from any token. */
    secret: z
      .string()
      .refine((s) => Buffer.byteLength(s) >= TENANT_SECRET_MIN_BYTES, {
        message: `a tenant's HMAC secret needs at least ${TENANT_SECRET_MIN_BYTES} bytes`,
      })
      .nullable()
      .default(null),
    publicKey: z.string().min(1).nullable().default(null),
    jwksUrl: url.nullable().default(null),
    issuer: claimValue.default(null),
    audience: claimValue.default(null),
    rolesClaim: z.string().min(1).optional(),
    /** added: this tenant's single-role claim (see auth.roleClaim); absent = the global one. */
    roleClaim: z.string().min(1).nullable().optional(),
  })
  .refine((a) => a.secret !== null || a.publicKey !== null || a.jwksUrl !== null, { message: 'needs secret, publicKey or jwksUrl' });

export const tenantSchema = z.strictObject({
  status: z.enum(['active', 'suspended']).default('active'),
  plan: z.string().min(1),
  hosts: z.array(hostName).default([]),
  brokers: z.array(brokerUrl).min(1),
  /**
   * added: the brokers were started with tenancy enabled and scope everything by `x-queen-tenant`,
   * which the edge then always sends. Only such brokers may be listed by more than one tenant
   * (docs/tenancy.md, "Dedicated and shared brokers").
   */
  tenancyAwareBrokers: z.boolean().default(false),
  /**
   * added: which routes the brokers register (docs/reference.md, "Broker"): `0.15.1` (released
   * brokers) or `contract` (every route of the broker contract, a build newer than 0.15.1). A route
   * the brokers do not register is answered `404 route_not_found` by the edge, in its JSON shape.
   */
  brokerVersion: z.enum(BROKER_VERSIONS).default('0.15.1'),
  cors: z.strictObject({ origins: z.array(z.string().min(1)).default([]) }).default({ origins: [] }),
  /** added: per-tenant overrides of the plan's limits. */
  limits: limits.partial().optional(),
  /** added: bounded-load factor for this tenant's ring (docs/clusters.md); null = off. */
  boundedLoadFactor: z.number().gt(1).nullable().default(null),
  /** added: this tenant's own identity provider; null = the global `auth` keys with the tenant claim. */
  auth: tenantAuthSchema.nullable().default(null),
  /** added: this tenant's trace sampling ratio, over its plan's (docs/observability.md); absent = the plan's. */
  traceRatio: z.number().min(0).max(1).optional(),
});

/** A tenant API key of the file: the id and SHA-256 of a key made with `queen-edge keys new` (docs/api-keys.md). */
const apiKeyEntry = z.strictObject({
  id: z.string().regex(/^[a-z2-7]{12}$/, 'the 12 characters after "qe_" in the key'),
  tenant: z.string().min(1),
  name: z
    .string()
    .max(200)
    .regex(/^[^\p{Cc}\p{Cf}]*$/u, 'printable characters only')
    .default(''),
  roles: z.array(z.enum(ROLE_NAMES)).min(1),
  sha256: z.string().regex(/^[0-9a-f]{64}$/, "the key's SHA-256, 64 lower-case hex digits"),
  expiresAt: z.iso.datetime({ offset: true }).nullable().default(null),
});

export const configSchema = z
  .strictObject({
    server: z
      .strictObject({
        https: z
          .strictObject({
            host: host.default('0.0.0.0'),
            port: port.nullable().default(8443),
            cert: z.string().min(1).nullable().default(null),
            key: z.string().min(1).nullable().default(null),
            sni: z.array(sniEntry).default([]),
            clientCa: z.string().min(1).nullable().default(null),
            /** added: with clientCa, refuse connections without a valid client certificate. */
            requireClientCert: z.boolean().default(true),
            /** added: offer HTTP/2 by ALPN (h2 and http/1.1). */
            http2: z.boolean().default(true),
          })
          .prefault({}),
        http: z.strictObject({ host: host.default('0.0.0.0'), port: port.nullable().default(null) }).prefault({}),
        admin: z
          .strictObject({
            host: host.default('127.0.0.1'),
            port: port.nullable().default(9090),
            token: z.string().nullable().default(null),
            /** added: DNS names the admin listener answers to besides IP literals, `localhost` and `host` (DNS rebinding guard). */
            allowedHosts: z
              .array(
                z
                  .string()
                  .regex(/^[A-Za-z0-9._-]+$/, 'a host name, without scheme, port or path')
                  .refine(...withinHostLength),
              )
              .default([]),
          })
          .prefault({}),
        bodyLimitBytes: z
          .number()
          .int()
          .positive()
          .default(16 * 1024 * 1024),
        /** added: request bodies the edge buffers (docs/limits.md, "Bodies in flight"): bytes per tenant and per process, and the time to receive one. */
        bodyBudget: z
          .strictObject({
            perTenantBytes: z
              .number()
              .int()
              .positive()
              .default(16 * 1024 * 1024),
            perProcessBytes: z
              .number()
              .int()
              .positive()
              .default(64 * 1024 * 1024),
            deadlineMs: z.number().int().positive().default(30000),
            /** added: time a body (buffered or streamed) may take before `minBytesPerSec` is asked of it. */
            graceMs: z.number().int().positive().default(2000),
            /** added: after the grace, each byte received allows 1/minBytesPerSec s more; a slower body is cut (408). */
            minBytesPerSec: z
              .number()
              .int()
              .positive()
              .default(16 * 1024),
          })
          .prefault({})
          .refine((b) => b.perTenantBytes <= b.perProcessBytes, { message: 'perTenantBytes must not exceed perProcessBytes' }),
        /** added: after a refusal that leaves an HTTP/1.1 body unread, what is still discarded before the connection closes (docs/limits.md). */
        lingeringClose: z
          .strictObject({
            timeMs: z.number().int().min(0).default(5000),
            idleMs: z.number().int().min(0).default(1000),
            bytes: z
              .number()
              .int()
              .min(0)
              .default(4 * 1024 * 1024),
          })
          .prefault({}),
        longPoll: z
          .strictObject({
            defaultTimeoutMs: z.number().int().positive().default(30000),
            maxTimeoutMs: z.number().int().positive().default(60000),
            slackMs: z.number().int().min(0).default(5000),
          })
          .prefault({}),
        /** Deprecated by trustedProxies: `true` alone is refused (any client could then choose the address it is limited by). */
        trustProxy: z.boolean().default(false),
        /** added: proxies (addresses or CIDR ranges) whose X-Forwarded-For is read: the client is the right-most entry not in these ranges. */
        trustedProxies: z.array(z.string().min(1)).default([]),
        /** added: time allowed to receive request headers (slowloris guard). */
        headersTimeoutMs: z.number().int().positive().default(20000),
        /** added: time to receive a whole request, body included (h1 and h2); never below the longest long poll or headersTimeoutMs. */
        requestTimeoutMs: z.number().int().positive().default(300000),
        /** added: idle keep-alive time on client connections. */
        keepAliveTimeoutMs: z.number().int().positive().default(65000),
        /** added: processes serving traffic (node:cluster); 1 = no cluster; 0 (default) = one per CPU with Redis, 1 without (docs/deploying.md). */
        workers: z.number().int().min(0).default(0),
        /** added: on SIGTERM, how long in-flight requests (parked long polls included) may run before their connections are closed. */
        drainTimeoutMs: z.number().int().min(0).default(30000),
        /** added: anonymous (public) route requests per client IP per window, per process; 0 = unlimited. */
        publicRateLimit: z
          .strictObject({
            requests: z.number().int().min(0).default(120),
            windowSec: z.number().int().positive().default(60),
          })
          .prefault({}),
      })
      .prefault({}),
    /** added: logging. */
    log: z
      .strictObject({
        level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
        /** added: `pretty` for people, `json` for log collectors, `auto` = pretty on a terminal. */
        format: z.enum(['auto', 'json', 'pretty']).default('auto'),
        accessLog: z.boolean().default(true),
        /** added: `iso` writes `time` as an ISO 8601 string instead of epoch milliseconds (JSON lines). */
        time: z.enum(['epoch', 'iso']).default('epoch'),
        /** added: `level` as a name ("info") instead of a number (30) (JSON lines). */
        levelNames: z.boolean().default(false),
      })
      .prefault({}),
    /** added: what /metrics shows (docs/operating.md, "Tenant labels"). */
    metrics: z
      .strictObject({
        /** `first:N`: the first N tenants seen by a process have a `tenant` label of their own, the rest are `_other`; `all` or `none`. */
        tenantLabels: z
          .string()
          .regex(/^(all|none|first:([1-9][0-9]{0,4}|100000))$/, 'all, none or first:N (1 to 100000)')
          .default('first:100'),
      })
      .prefault({}),
    /** added: how shared limits are decided (docs/limits.md, "Leased mode"). */
    limits: z
      .strictObject({
        /** `exact`: one Redis round trip per request; `leased`: requests admitted locally from slices of the shared limits. */
        mode: z.enum(['exact', 'leased']).default('exact'),
        lease: z
          .strictObject({
            durationMs: z.number().int().min(10).max(60000).default(1000),
            /** Share of a tenant's burst all instances' slices may hold together: the overshoot bound. */
            sliceFraction: z.number().gt(0).max(1).default(0.25),
          })
          .prefault({}),
      })
      .prefault({}),
    redis: z
      .strictObject({
        url: z.string().min(1).nullable().default(null),
        cluster: z.array(z.string().min(1)).default([]),
        keyPrefix: z.string().default('qe:'),
        timeoutMs: z.number().int().positive().default(50),
        failMode: z.enum(['open', 'closed', 'local']).default('local'),
      })
      .prefault({}),
    /** The durable store of records and usage (docs/store.md); no url = records from the file and Redis only. */
    store: z
      .strictObject({
        url: z.string().min(1).nullable().default(null),
        /** Every table of the edge lives in this schema, so the store may be the broker's own database. */
        schema: z
          .string()
          .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'a lower-case identifier: letters, digits and _')
          .default('queen_edge'),
        timeoutMs: z.number().int().positive().default(2000),
        /** Tenant-hours of usage held while the usage store does not take them; past it, counts are dropped and said (docs/store.md). */
        usageBufferEntries: z.number().int().positive().default(250_000),
      })
      .prefault({}),
    auth: z
      .strictObject({
        algorithms: algorithms.default(['HS256', 'RS256', 'ES256', 'EdDSA']),
        secret: z.string().nullable().default(null),
        publicKey: z.string().min(1).nullable().default(null),
        jwksUrl: url.nullable().default(null),
        issuer: claimValue.default(null),
        audience: claimValue.default(null),
        clockToleranceSec: z.number().int().min(0).default(30),
        rolesClaim: z.string().min(1).default('roles'),
        /** added: the single-role string claim read when the rolesClaim is absent (Queen's own tokens carry `role`); null = never read. */
        roleClaim: z.string().min(1).nullable().default('role'),
        tenantClaim: z.string().min(1).default('tenant'),
        defaultTenant: z.string().min(1).nullable().default(null),
        /** added: verified tokens kept in each share of the cache (the global settings' share, and each tenant's with its own `auth`). */
        cacheSize: z.number().int().min(0).default(10000),
        /** added: bytes of verified tokens the global settings' share of the cache holds. */
        cacheBytes: z
          .number()
          .int()
          .min(0)
          .default(32 * 1024 * 1024),
        /** added: bytes of verified tokens each tenant with its own `auth` may hold in the cache (its share; one IdP cannot evict another's tokens). */
        tenantCacheBytes: z
          .number()
          .int()
          .min(0)
          .default(4 * 1024 * 1024),
        /** added: longer bearer tokens are refused (401) before any parsing or signature check. */
        maxTokenBytes: z
          .number()
          .int()
          .min(64)
          .max(64 * 1024)
          .default(8 * 1024),
        /**
         * added: what a JWKS fetch may bring in and where a tenant's may go (docs/security.md, "JWKS
         * endpoints"). The operator's own `auth.jwksUrl` may be any http(s) address.
         */
        jwks: z
          .strictObject({
            /** A larger document is refused before it is parsed; the keys already loaded stay. */
            maxBytes: z
              .number()
              .int()
              .min(1024)
              .default(256 * 1024),
            /** A set with more members is refused whole. */
            maxKeys: z.number().int().min(1).default(100),
            /** Tenants' `jwksUrl` may be plain http (off: https only). For tests and closed networks. */
            allowHttp: z.boolean().default(false),
            /** Tenants' `jwksUrl` may reach loopback, private, link-local and other non-public addresses (off: refused, also when a name resolves to one at fetch time). */
            allowPrivateAddresses: z.boolean().default(false),
          })
          .prefault({}),
        /** added: refuse tokens without `exp` (they would never expire). */
        requireExp: z.boolean().default(true),
        /** added: refuse tokens whose `iat` is older than this (and tokens without `iat`); null = no age limit. */
        maxTokenAgeSec: z.number().int().positive().nullable().default(null),
        /** added: failed signature checks per (client address, token issuer + subject) per window, per process, before 429; 0 = unlimited. */
        failedAuth: z
          .strictObject({
            attempts: z.number().int().min(0).default(60),
            windowSec: z.number().int().positive().default(60),
            /** added: signature checks per client address per second, per process (identities that verified lately get as many again); 0 = unlimited. */
            signaturesPerSec: z.number().int().min(0).default(100),
          })
          .prefault({}),
      })
      .prefault({}),
    upstreamIdentity: z
      .strictObject({
        mode: z.enum(['passthrough', 'mint', 'none']).default('passthrough'),
        tenantHeader: z.boolean().default(false),
        mint: z
          .strictObject({
            algorithm: z.enum(['HS256', 'HS384', 'HS512', 'RS256', 'ES256', 'EdDSA']).default('HS256'),
            secret: z.string().nullable().default(null),
            privateKey: z.string().min(1).nullable().default(null),
            ttlSec: z.number().int().positive().default(300),
            issuer: z.string().default('queen-edge'),
          })
          .prefault({}),
      })
      .prefault({}),
    /** added: upstream pools and health (docs/clusters.md). */
    upstream: z
      .strictObject({
        connections: z.number().int().positive().default(128),
        /** added: fraction of `connections` one tenant's requests (parked polls aside) may hold on one broker; the rest wait in its own queue (docs/clusters.md). */
        tenantShare: z.number().gt(0).max(1).default(0.25),
        /** added: fraction of `connections` of a shared broker only tenants with fewer than `reservedFor` requests in flight there may take (docs/clusters.md). */
        reservedShare: z.number().min(0).lt(1).default(0.25),
        /** added: tenants with fewer requests than this in flight on a shared broker may take its reserved connections. */
        reservedFor: z.number().int().positive().default(4),
        connectTimeoutMs: z.number().int().positive().default(2000),
        /** Upstream timeout for requests that are not long polls. */
        requestTimeoutMs: z.number().int().positive().default(30000),
        healthIntervalMs: z.number().int().positive().default(2000),
        healthTimeoutMs: z.number().int().positive().default(1000),
        downAfter: z.number().int().positive().default(2),
        upAfter: z.number().int().positive().default(2),
        /** Ring positions: `sdk` places lanes as the Queen SDKs do; `avalanche` balances better (docs/clusters.md). */
        ringHash: z.enum(['sdk', 'avalanche']).default('sdk'),
      })
      .prefault({}),
    /** added: OpenTelemetry traces of the edge's own work (docs/observability.md); off unless `enabled`. */
    tracing: z
      .strictObject({
        enabled: z.boolean().default(false),
        /** OTLP/HTTP (protobuf) traces URL; null = OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces, else http://localhost:4318/v1/traces. */
        endpoint: url.nullable().default(null),
        /** null = OTEL_SERVICE_NAME, else `queen-edge`. */
        serviceName: z.string().min(1).nullable().default(null),
        /** A sampled (or unsampled) parent in the client's traceparent decides; off: only the ratio does. null = OTEL_TRACES_SAMPLER (parentbased_* or not), else true. */
        parentBased: z.boolean().nullable().default(null),
        /** Share of requests traced when no parent decides (a plan's or tenant's traceRatio overrides). null = OTEL_TRACES_SAMPLER(_ARG), else 1. */
        ratio: z.number().min(0).max(1).nullable().default(null),
        /** The edge's own refusals (4xx and 5xx with a code) are traced whatever the sampler said. */
        alwaysSampleRefusals: z.boolean().default(false),
        /** A client's `baggage` header is sent on to the broker (off: dropped). It never becomes a span attribute. */
        forwardBaggage: z.boolean().default(false),
        /** Spans waiting for export at most; beyond, new spans are dropped and counted. */
        maxQueueSpans: z.number().int().min(1).max(1_000_000).default(2048),
        /** Spans per export request. */
        batchSpans: z.number().int().min(1).max(100_000).default(512),
        /** Longest wait between exports. */
        exportDelayMs: z.number().int().min(1).default(1000),
        /** An export taking longer is abandoned (its spans counted as failed). */
        exportTimeoutMs: z.number().int().min(1).default(10_000),
      })
      .prefault({}),
    routes: z.record(z.string(), z.array(z.enum(ROLE_NAMES))).default({}),
    /** added: extra query parameter names a route accepts and forwards (as text), by route name (docs/reference.md). */
    queryAllow: z.record(z.string(), z.array(z.string().regex(/^[A-Za-z][A-Za-z0-9_]{0,63}$/))).default({}),
    plans: z.record(z.string(), planSchema),
    tenants: z.record(z.string(), tenantSchema),
    /** added: tenant API keys declared by their SHA-256, for an edge without Redis (docs/api-keys.md). */
    apiKeys: z.array(apiKeyEntry).default([]),
  })
  .superRefine((cfg, ctx) => {
    for (const [id, t] of Object.entries(cfg.tenants)) {
      if (!cfg.plans[t.plan]) ctx.addIssue({ code: 'custom', path: ['tenants', id, 'plan'], message: `unknown plan "${t.plan}"` });
      const refusal = t.auth?.jwksUrl ? jwksUrlRefusal(t.auth.jwksUrl, { tenant: cfg.auth.jwks }) : null;
      if (refusal !== null) ctx.addIssue({ code: 'custom', path: ['tenants', id, 'auth', 'jwksUrl'], message: refusal });
    }
    const keyIds = new Set<string>();
    for (const [i, k] of cfg.apiKeys.entries()) {
      if (!cfg.tenants[k.tenant]) ctx.addIssue({ code: 'custom', path: ['apiKeys', i, 'tenant'], message: `unknown tenant "${k.tenant}"` });
      if (keyIds.has(k.id)) ctx.addIssue({ code: 'custom', path: ['apiKeys', i, 'id'], message: `key id "${k.id}" listed twice` });
      keyIds.add(k.id);
    }
    if (cfg.auth.defaultTenant && !cfg.tenants[cfg.auth.defaultTenant]) {
      ctx.addIssue({ code: 'custom', path: ['auth', 'defaultTenant'], message: `unknown tenant "${cfg.auth.defaultTenant}"` });
    }
    if ((cfg.server.https.cert === null) !== (cfg.server.https.key === null)) {
      ctx.addIssue({ code: 'custom', path: ['server', 'https'], message: 'cert and key must be given together' });
    }
    if (cfg.upstreamIdentity.mode === 'mint' && !cfg.upstreamIdentity.mint.secret && !cfg.upstreamIdentity.mint.privateKey) {
      ctx.addIssue({ code: 'custom', path: ['upstreamIdentity', 'mint'], message: 'mint mode needs secret or privateKey' });
    }
    if (cfg.server.workers > 1 && cfg.redis.url === null && cfg.redis.cluster.length === 0) {
      // Limits, parked-poll slots and admin writes live in memory per process without Redis: workers would disagree.
      ctx.addIssue({ code: 'custom', path: ['server', 'workers'], message: 'more than one worker needs shared state: set redis.url or redis.cluster' });
    }
    const badRanges = invalidProxyRanges(cfg.server.trustedProxies);
    if (badRanges.length > 0) {
      ctx.addIssue({ code: 'custom', path: ['server', 'trustedProxies'], message: `not an address or CIDR range: ${badRanges.join(', ')}` });
    }
    if (cfg.server.trustProxy && cfg.server.trustedProxies.length === 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['server', 'trustProxy'],
        message:
          "trustProxy: true is replaced by server.trustedProxies: list your proxies' addresses or CIDR ranges (X-Forwarded-For is then read only from them) and remove trustProxy",
      });
    }
    if (cfg.server.longPoll.defaultTimeoutMs > cfg.server.longPoll.maxTimeoutMs) {
      ctx.addIssue({ code: 'custom', path: ['server', 'longPoll', 'defaultTimeoutMs'], message: 'must not exceed maxTimeoutMs' });
    }
  });

/** The validated file, before compilation into runtime tables. */
export type RawConfig = z.output<typeof configSchema>;
export type RawPlan = z.output<typeof planSchema>;
export type RawTenant = z.output<typeof tenantSchema>;
export type RawTenantAuth = z.output<typeof tenantAuthSchema>;
export type Role = (typeof ROLE_NAMES)[number];
export type Feature = (typeof FEATURES)[number];
export type BrokerVersion = (typeof BROKER_VERSIONS)[number];
export type AuthConfig = RawConfig['auth'];
export type TracingConfig = RawConfig['tracing'];
