/**
 * Starts a real queen-edge (all listeners on port 0) in front of broker doubles, for pipeline
 * tests through real sockets.
 */
import http2 from 'node:http2';
import { Agent, request, type Dispatcher } from 'undici';
import { SignJWT } from 'jose';
import { parseConfig } from '../../src/config/load.js';
import type { RawConfig } from '../../src/config/schema.js';
import { startApp, type App, type AppOptions } from '../../src/app.js';
import { silentLogger } from '../../src/observability/log.js';

export const TEST_SECRET = 'queen-edge-test-secret-0123456789abcdef';

export interface EdgeHarness {
  readonly app: App;
  readonly config: RawConfig;
  /** https://127.0.0.1:<port> */
  readonly url: string;
  /** http://127.0.0.1:<port> of the plaintext listener */
  readonly httpUrl: string;
  readonly adminUrl: string;
  /** Trusts the self-signed certificate. */
  readonly dispatcher: Dispatcher;
  close(): Promise<void>;
}

type Json = Record<string, unknown>;

/** `over` laid on `base`, objects merged key by key (arrays and scalars replaced). */
export function merge(base: Json, over: Json): Json {
  const out: Json = { ...base };
  for (const [k, v] of Object.entries(over)) {
    const b = out[k];
    out[k] = v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b) ? merge(b as Json, v as Json) : v;
  }
  return out;
}

export const TEST_PLAN = {
  features: [],
  limits: {
    requestsPerSec: 100000,
    requestBurst: 100000,
    messagesPerSec: 1000000,
    messageBurst: 1000000,
    parkedPolls: 1000,
    maxPayloadBytes: 1048576,
    maxBatch: 1000,
  },
  quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
  storageBytes: 1099511627776,
};

/** A config for tests: brokers given, everything else on port 0, silent, in-memory. */
export function testConfig(brokers: string[], overrides: Json = {}): RawConfig {
  const base: Json = {
    server: {
      https: { host: '127.0.0.1', port: 0 },
      http: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      publicRateLimit: { requests: 0 },
      longPoll: { defaultTimeoutMs: 30000, maxTimeoutMs: 60000, slackMs: 5000 },
    },
    log: { level: 'silent' },
    // Every test client is 127.0.0.1: the per-client-IP limits are off unless a test turns them on.
    // Test IdPs are plain http on loopback: tenants' JWKS may be there (tests of that policy turn it back off).
    auth: {
      secret: TEST_SECRET,
      defaultTenant: null,
      failedAuth: { attempts: 0, signaturesPerSec: 0 },
      jwks: { allowHttp: true, allowPrivateAddresses: true },
    },
    // Probes get a generous timeout: under a loaded CI machine a 200 ms probe marks healthy brokers down.
    upstream: { healthIntervalMs: 200, healthTimeoutMs: 2000, downAfter: 3, upAfter: 1 },
    plans: { test: TEST_PLAN },
    tenants: { acme: { plan: 'test', hosts: ['acme.localhost'], brokers, cors: { origins: ['https://app.example.com', 'https://*.acme.dev'] } } },
  };
  return parseConfig(merge(base, overrides), {});
}

/**
 * `server:` overrides that make the body deadline short: it is the longest of requestTimeoutMs and
 * a parked poll, so both are short here (1.5 s), and the head must arrive within 0.5 s.
 */
export const SHORT_DEADLINES = { requestTimeoutMs: 1500, headersTimeoutMs: 500, longPoll: { defaultTimeoutMs: 500, maxTimeoutMs: 1000, slackMs: 200 } };

/** An h2 session to `url` (self-signed certificate accepted), once connected; its later errors are the test's to observe. */
export function h2Session(url: string): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(url, { rejectUnauthorized: false });
    s.once('connect', () => {
      s.on('error', () => {});
      resolve(s);
    });
    s.once('error', reject);
  });
}

/**
 * Resolves once the edge has handled what was sent before on `session` (frames are read in order):
 * a later stream, one the edge answers itself (no route), has its whole answer. Proof that a
 * reset or a close sent earlier has had its effect, in place of a pause.
 */
export function h2Settled(session: http2.ClientHttp2Session): Promise<void> {
  return new Promise((resolve, reject) => {
    const later = session.request({ ':method': 'GET', ':path': '/h2-settled', ':authority': 'acme.localhost' });
    later.on('error', reject);
    later.on('response', (h) => {
      if (h[':status'] !== 404) reject(new Error(`expected the edge's own 404 for /h2-settled, got ${String(h[':status'])}`));
    });
    later.resume();
    later.on('close', () => resolve());
  });
}

export async function startEdge(config: RawConfig, opts: AppOptions = {}): Promise<EdgeHarness> {
  const app = await startApp(config, { log: silentLogger(), ...opts });
  const dispatcher = new Agent({ connect: { rejectUnauthorized: false }, keepAliveTimeout: 1000 });
  const a = app.addresses;
  return {
    app,
    config,
    url: `https://127.0.0.1:${a.https!.port}`,
    httpUrl: a.http ? `http://127.0.0.1:${a.http.port}` : '',
    adminUrl: `http://127.0.0.1:${a.admin!.port}`,
    dispatcher,
    async close() {
      await dispatcher.destroy();
      await app.close(100);
    },
  };
}

/** Signs an HS256 token with the test secret. */
export async function token(claims: Json & { roles?: string[] | string; tenant?: unknown }, secret = TEST_SECRET, expiresIn = '10m'): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .setSubject(String(claims.sub ?? 'user-1'))
    .sign(new TextEncoder().encode(secret));
}

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: unknown;
}

/** One request through the edge; the body is read whole. */
export async function call(
  h: EdgeHarness,
  method: Dispatcher.HttpMethod,
  path: string,
  opts: { token?: string; body?: unknown; headers?: Record<string, string>; host?: string; base?: string } = {},
): Promise<Reply> {
  const headers: Record<string, string> = { host: opts.host ?? 'acme.localhost', ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | undefined;
  if (opts.body !== undefined) {
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  return readReply(await request(`${opts.base ?? h.url}${path}`, { method, headers, body, dispatcher: h.dispatcher }));
}

/** Reads a whole response; `json` is the parsed body, or undefined when it is empty or not JSON. */
export async function readReply(res: Dispatcher.ResponseData): Promise<Reply> {
  const text = await res.body.text();
  let json: unknown;
  try {
    json = text === '' ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.statusCode, headers: res.headers, text, json };
}

/** Requests the edge forwarded to a broker double (its own health probes carry no X-Request-Id). */
export function forwarded<R extends { headers: Record<string, unknown> }>(broker: { requests: R[] }): R[] {
  return broker.requests.filter((r) => r.headers['x-request-id'] !== undefined);
}
