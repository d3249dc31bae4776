/**
 * Token verification (docs/architecture.md) with jose, and the verified-token cache that keeps signature
 * checks off the hot path.
 *
 * Key choice is by the token header's `alg` family, so a key of one kind can never be used as
 * another: HS* only ever sees `auth.secret` as raw bytes; RS/PS/ES/EdDSA only ever see the PEM
 * public key or JWKS members, which jose refuses to use for HMAC. That closes the classic
 * "HS256 signed with the RSA public key" confusion.
 *
 * JWKS semantics (own fetch, own index of the members, jose `importJWK` per member, so the refetch
 * policy and the cost of a lookup are ours):
 * - start() pre-warms; a failure is logged and start() still resolves.
 * - An unknown `kid` triggers one refetch, shared by every request waiting on it (single-flight).
 * - A refetch that still does not know the `kid` starts a cooldown (JWKS_COOLDOWN_MS) during which
 *   unknown kids are refused without fetching, so random kids cannot hammer the IdP. A refetch
 *   that finds the kid starts no cooldown, so back-to-back rotations are picked up at once.
 * - A failed fetch keeps the keys already loaded (stale keys keep verifying) and blocks further
 *   fetches for JWKS_FAILURE_BACKOFF_MS; that also paces retries when the IdP is down at start.
 * - Keys older than JWKS_MAX_AGE_MS are refreshed in the background on the next verification, so
 *   keys the IdP removed stop verifying without a restart.
 * - Whatever starts them, a set is fetched JWKS_FETCH_BURST times in a row at most, then once per
 *   JWKS_FETCH_REFILL_MS: an IdP that adds a new kid before every token cannot make the edge
 *   fetch and parse its set per token.
 * - A set is bounded (`auth.jwks`): its document in bytes (jwks-fetch.ts) and its members in
 *   number, and a token's key is looked up by kid in a map, so a token costs the same against a
 *   set of 2 keys as of the largest allowed.
 * All of these use the injected clock.
 *
 * Cache: verified tokens by exact string, bounded LRU in entries and bytes, valid until exp +
 * clockTolerance (tokens without exp, where `auth.requireExp: false` lets them in: NO_EXP_CACHE_MS;
 * with maxTokenAgeSec: never past iat + maxTokenAgeSec). Failures are not cached: a bad token costs a
 * header decode and at most one signature check, bounded by `auth.maxTokenBytes`, and caching
 * garbage would only let an attacker evict good entries.
 */
import type { KeyObject } from 'node:crypto';
import {
  decodeJwt,
  decodeProtectedHeader,
  errors,
  importJWK,
  jwtVerify,
  type CryptoKey,
  type JWK,
  type JWTPayload,
  type JWTVerifyOptions,
  type ProtectedHeaderParameters,
} from 'jose';
import { ExpiringMap } from '../cache/expiring-map.js';
import { isInlineKey, parsePublicKey, readKeyFile } from './key-files.js';
import { fetchJwksDocument } from './jwks-fetch.js';
import type { JwksFetchPolicy } from './jwks-url.js';
import { jwkThumbprint } from './key-trust.js';
import type { AuthConfig } from '../config/schema.js';
import { edgeError, EdgeError } from '../errors.js';
import type { Logger } from '../observability/log.js';

/**
 * What one cached token costs against its share's byte bound: the token string once (the key and
 * Identity.token are the same string), its decoded claims and the entry's objects. Measured heap
 * per entry: 1.8 to 2.05 bytes per token character for 5-7 KB tokens, 550 bytes for a 157-byte
 * one (docs/limits.md); the estimate stays above both.
 */
const ENTRY_FIXED_BYTES = 512;
const ENTRY_BYTES_PER_TOKEN_CHAR = 2.2;
/** How long a verified token without `exp` stays cached. */
const NO_EXP_CACHE_MS = 5 * 60_000;
/** After a refetch that did not know the requested kid, unknown kids fetch nothing this long. */
const JWKS_COOLDOWN_MS = 30_000;
/** After a failed JWKS fetch, no new fetch starts for this long. */
const JWKS_FAILURE_BACKOFF_MS = 5_000;
/** Loaded JWKS keys are refreshed in the background once they are this old. */
const JWKS_MAX_AGE_MS = 10 * 60_000;
/** One JWKS request may take this long. */
const JWKS_FETCH_TIMEOUT_MS = 5_000;
/** Fetches of one set in a burst (a start, a rotation and another right after it), then one per refill period. */
const JWKS_FETCH_BURST = 4;
const JWKS_FETCH_REFILL_MS = 10_000;
/** A roles claim by this name may hold one role as a string (a list claim must be an array). */
const SINGLE_ROLE_CLAIM = 'role';
/** Curve names as node:crypto reports them, to the ES* algorithm that uses each. */
const EC_ALGORITHM: Readonly<Record<string, string>> = { prime256v1: 'ES256', secp384r1: 'ES384', secp521r1: 'ES512' };
/** Base64url/b64token characters (RFC 6750 §2.1); anything else in a header is malformed. */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

/** Who a verified token says the caller is. */
export interface Identity {
  readonly token: string;
  readonly sub: string | null;
  readonly roles: ReadonlySet<string>;
  readonly tenant: string | null;
  readonly expMs: number | null;
  readonly claims: Readonly<Record<string, unknown>>;
  /** Where `roles` came from, for the 403 that refuses them: `roles read from claim "roles"`, or the claims looked for. */
  readonly rolesRead?: string;
}

/**
 * Pulls the token from the Authorization header: `Bearer <t>` or the bare token; undefined when
 * absent. Its characters are not checked here: the caller asks the cache of verified tokens first
 * (a token there passed the check before it was verified) and checks with wellFormedToken() on a miss.
 */
export function bearerToken(header: string | string[] | undefined): string | undefined | EdgeError {
  if (Array.isArray(header)) {
    if (header.length > 1) return deny('several authorization headers');
    header = header[0];
  }
  if (header === undefined) return undefined;
  const value = header.trim();
  if (value === '') return undefined;
  if (!hasBearerScheme(value)) return value;
  let i = 7;
  while (i < value.length && (value.charCodeAt(i) === 0x20 || value.charCodeAt(i) === 0x09)) i++;
  return value.slice(i);
}

/** Base64url/b64token characters only (RFC 6750 §2.1): anything else in the header is malformed. */
export function wellFormedToken(token: string): boolean {
  return B64TOKEN.test(token);
}

/** `bearer` in any case, then a space or tab (the value is trimmed: a bare `Bearer` is the token "Bearer"'s scheme with nothing after it). */
function hasBearerScheme(value: string): boolean {
  if (value.length < 6 || (value.charCodeAt(0) | 0x20) !== 0x62 /* b */) return false;
  if (value.length > 6) {
    const sep = value.charCodeAt(6);
    if (sep !== 0x20 && sep !== 0x09) return false;
  }
  return value.slice(0, 6).toLowerCase() === 'bearer';
}

/**
 * Asked right before a signature check, after every cheaper refusal (size, header, alg, key,
 * unverified exp/nbf/iss), and told the check's outcome: the per-client throttle
 * (src/limits/client-limits.ts).
 */
export interface SignatureGate {
  /** A refusal (429) when this check must not run now; null to go ahead. */
  admit(): Promise<EdgeError | null>;
  settled(ok: boolean): void;
}

/** Told when a verification waited for a JWKS fetch (a traced request's span: observability/tracing.ts). */
export interface JwksWatch {
  /** The fetch this verification waited for since `since` (performance.now()) ended; `loaded` false when it failed. */
  jwksFetched(since: number, loaded: boolean): void;
}

/** Verifies bearer tokens and remembers the ones that passed. */
export interface TokenVerifier {
  /** Sync cache hit for a token verified before and not yet expired (now = clock()); undefined otherwise. */
  cached(token: string): Identity | undefined;
  /** Full verification; resolves an Identity or EdgeError('unauthorized', <reason>, or the gate's refusal), never rejects. */
  verify(token: string, gate?: SignatureGate, watch?: JwksWatch): Promise<Identity | EdgeError>;
  /** Loads the PEM key (throws if it is unusable) and pre-warms the JWKS (logs if the IdP is down). */
  start(): Promise<void>;
  /** Aborts a JWKS fetch in flight; no further fetches start. */
  close(): void;
  /** What its share of the token cache holds, by the ENTRY_* estimates. */
  readonly cacheBytes: number;
}

/**
 * What a verifier is given by its owner (see verifiers.ts): its own share of the token cache, so
 * a token verified under one tenant's keys is never a hit for another and one tenant's tokens
 * never evict another's, and the JWKS sets, one per URL.
 */
export interface KeyContext {
  readonly cache: ExpiringMap<string, Identity>;
  jwks(url: string): JwksKeys;
  /** Thumbprints of JWKS members this verifier must not use (another trust domain holds them). */
  refusedKeys?(): ReadonlySet<string>;
  /** Called for every signature check (a cache miss that reached a key). */
  checked?(): void;
}

/** A share of the verified-token cache: `entries` tokens and `bytes` of them (ENTRY_* estimates) at most. */
export function tokenCache(entries: number, bytes: number): ExpiringMap<string, Identity> {
  return new ExpiringMap<string, Identity>(entries, {
    touchOnGet: true,
    maxBytes: bytes,
    sizeOf: (token) => ENTRY_FIXED_BYTES + Math.ceil(token.length * ENTRY_BYTES_PER_TOKEN_CHAR),
  });
}

/** Builds the verifier for the `auth:` section; alone (own cache and JWKS) unless given a KeyContext. */
export function createTokenVerifier(cfg: AuthConfig, deps: { log: Logger; clock?: () => number; keys?: KeyContext }): TokenVerifier {
  const clock = deps.clock ?? Date.now;
  if (deps.keys) return new Verifier(cfg, deps.log, clock, deps.keys, false);
  const own = new Map<string, JwksKeys>();
  const keys: KeyContext = {
    cache: tokenCache(cfg.cacheSize, cfg.cacheBytes),
    jwks: (url) => own.get(url) ?? own.set(url, new JwksKeys(url, deps.log, clock, undefined, { ...cfg.jwks, tenant: null })).get(url)!,
  };
  return new Verifier(cfg, deps.log, clock, keys, true);
}

/** The PEM key of a verifier and its RFC 7638 thumbprint. */
interface PemKey {
  readonly key: KeyObject;
  readonly thumbprint: string | null;
}

function deny(reason: string): EdgeError {
  return edgeError('unauthorized', reason);
}

class Verifier implements TokenVerifier {
  readonly #cfg: AuthConfig;
  readonly #log: Logger;
  readonly #clock: () => number;
  /** Verified tokens by exact string, least recently used evicted first. */
  readonly #cache: ExpiringMap<string, Identity>;
  readonly #algorithms: ReadonlySet<string>;
  readonly #toleranceMs: number;
  readonly #secret: Uint8Array | null;
  readonly #pemPath: string | null;
  readonly #jwks: JwksKeys | null;
  readonly #ownsJwks: boolean;
  readonly #checked: (() => void) | undefined;
  readonly #refusedKeys: () => ReadonlySet<string>;
  readonly #anyKey: boolean;
  #pem: Promise<PemKey> | null = null;
  /**
   * Verifications under way, by token: a burst of requests carrying one new token (h2 streams
   * opened at once) costs one signature check and one place in the signature gate, not one each.
   */
  readonly #verifying = new Map<string, Promise<Identity | EdgeError>>();

  constructor(cfg: AuthConfig, log: Logger, clock: () => number, keys: KeyContext, ownsJwks: boolean) {
    this.#cfg = cfg;
    this.#log = log;
    this.#clock = clock;
    this.#cache = keys.cache;
    this.#ownsJwks = ownsJwks;
    this.#checked = keys.checked;
    this.#refusedKeys = keys.refusedKeys ?? (() => NO_KEYS);
    this.#algorithms = new Set(cfg.algorithms);
    this.#toleranceMs = cfg.clockToleranceSec * 1000;
    this.#secret = cfg.secret ? new TextEncoder().encode(cfg.secret) : null;
    this.#pemPath = cfg.publicKey;
    this.#jwks = cfg.jwksUrl ? keys.jwks(cfg.jwksUrl) : null;
    this.#anyKey = this.#secret !== null || this.#pemPath !== null || this.#jwks !== null;
  }

  cached(token: string): Identity | undefined {
    return this.#cache.get(token, this.#clock());
  }

  async verify(token: string, gate?: SignatureGate, watch?: JwksWatch): Promise<Identity | EdgeError> {
    // Before any parsing: a large token costs its decode, its signature hash and, once verified, cache space.
    if (token.length > this.#cfg.maxTokenBytes) return deny(`token too large (${token.length} bytes; the limit is ${this.#cfg.maxTokenBytes})`);
    const hit = this.cached(token);
    if (hit) return hit;
    if (!this.#anyKey) return deny('no verification key configured');
    const under = this.#verifying.get(token);
    if (under !== undefined) {
      // Only a success is shared: a refusal may be the other request's (its address over the gate).
      const shared = await under;
      if (!(shared instanceof EdgeError)) return shared;
    }
    const verifying = this.#verifyOnce(token, gate, watch);
    if (under === undefined) {
      this.#verifying.set(token, verifying);
      void verifying.finally(() => this.#verifying.delete(token));
    }
    return verifying;
  }

  async #verifyOnce(token: string, gate: SignatureGate | undefined, watch: JwksWatch | undefined): Promise<Identity | EdgeError> {
    try {
      return await this.#verifyUncached(token, gate, watch);
    } catch (err) {
      // Every expected failure is mapped below; reaching here is a bug, so log it but stay a 401.
      this.#log.error({ err }, 'token verification failed unexpectedly');
      return deny('invalid token');
    }
  }

  async start(): Promise<void> {
    if (this.#pemPath !== null) await this.#pemKey(this.#pemPath);
    await this.#jwks?.refresh();
  }

  close(): void {
    if (this.#ownsJwks) this.#jwks?.close();
  }

  get cacheBytes(): number {
    return this.#cache.bytes;
  }

  async #verifyUncached(token: string, gate: SignatureGate | undefined, watch: JwksWatch | undefined): Promise<Identity | EdgeError> {
    let header: ProtectedHeaderParameters;
    try {
      header = decodeProtectedHeader(token);
    } catch {
      return deny('malformed token');
    }
    const { alg } = header;
    if (typeof alg !== 'string' || !this.#algorithms.has(alg)) return deny('algorithm not allowed');
    const key = await this.#keyFor(alg, header, watch);
    if (key instanceof EdgeError) return key;
    const options: JWTVerifyOptions = {
      algorithms: this.#cfg.algorithms,
      clockTolerance: this.#cfg.clockToleranceSec,
      currentDate: new Date(this.#clock()),
    };
    if (this.#cfg.issuer !== null) options.issuer = this.#cfg.issuer;
    if (this.#cfg.audience !== null) options.audience = this.#cfg.audience;
    Object.assign(options, lifetimeOptions(this.#cfg));
    const early = unverifiedRefusal(token, this.#cfg, this.#clock());
    if (early !== null) return early;
    const stop = gate === undefined ? null : await gate.admit();
    if (stop !== null) return stop;
    let payload: JWTPayload;
    this.#checked?.();
    try {
      ({ payload } = await jwtVerify(token, key, options));
    } catch (err) {
      gate?.settled(false);
      return deny(reasonFor(err));
    }
    const identity = identityFrom(token, payload, this.#cfg, this.#clock());
    gate?.settled(!(identity instanceof EdgeError));
    if (identity instanceof EdgeError) return identity;
    const validUntil = Math.min(
      identity.expMs === null ? this.#clock() + NO_EXP_CACHE_MS : identity.expMs + this.#toleranceMs,
      this.#cfg.maxTokenAgeSec === null ? Infinity : ((payload.iat as number) + this.#cfg.maxTokenAgeSec) * 1000 + this.#toleranceMs,
    );
    this.#cache.set(token, identity, validUntil, this.#clock());
    return identity;
  }

  /**
   * HS* uses the secret only. Asymmetric: a token with a `kid` goes to the JWKS when one is
   * configured; otherwise the PEM key when it suits the alg; otherwise the JWKS.
   */
  async #keyFor(alg: string, header: ProtectedHeaderParameters, watch: JwksWatch | undefined): Promise<Uint8Array | KeyObject | CryptoKey | EdgeError> {
    if (alg.startsWith('HS')) return this.#secret ?? deny('no key for this algorithm');
    if (this.#pemPath !== null && (header.kid === undefined || this.#jwks === null)) {
      let pem: PemKey;
      try {
        pem = await this.#pemKey(this.#pemPath);
      } catch {
        return deny('verification key unavailable');
      }
      if (pemSuits(pem.key, alg)) {
        // A domain configured earlier holds this key too (key-claims.ts): it is theirs.
        return pem.thumbprint !== null && this.#refusedKeys().has(pem.thumbprint) ? deny('key not trusted for this tenant') : pem.key;
      }
    }
    return this.#jwks ? this.#jwks.keyFor(header, this.#refusedKeys, watch) : deny('no key for this algorithm');
  }

  /** Read once, by start() or by the first verification that needs it. */
  #pemKey(path: string): Promise<PemKey> {
    this.#pem ??= loadPublicKey(path).then((key) => ({ key, thumbprint: jwkThumbprint(key.export({ format: 'jwk' }) as JWK) }));
    return this.#pem;
  }
}

/**
 * The public key `ref` holds (PEM text: SPKI or an X.509 certificate; or a JWK as JSON) or, when it
 * is a path (a verifier built from a config not loaded by loadConfigFile), the key in that file,
 * read as key-files.ts reads them. Refuses private keys and unsupported types.
 */
export async function loadPublicKey(ref: string): Promise<KeyObject> {
  const text = isInlineKey(ref) ? ref.trim() : await readKeyFile(ref);
  const where = isInlineKey(ref) ? 'auth.publicKey' : `auth.publicKey ${ref}`;
  // createPublicKey would derive the public half of a private key; a private key has no business here.
  if (text.includes('PRIVATE KEY-----') || (text.startsWith('{') && /"d"\s*:/.test(text))) {
    throw new Error(`${where}: expected a public key or certificate, found a private key`);
  }
  const key = parsePublicKey(text);
  const type = key.asymmetricKeyType;
  const supported = type === 'rsa' || type === 'ed25519' || (type === 'ec' && EC_ALGORITHM[key.asymmetricKeyDetails?.namedCurve ?? ''] !== undefined);
  if (!supported) throw new Error(`${where}: unsupported key type ${type ?? 'unknown'}`);
  return key;
}

function pemSuits(key: KeyObject, alg: string): boolean {
  switch (key.asymmetricKeyType) {
    case 'rsa':
      return alg.startsWith('RS') || alg.startsWith('PS');
    case 'ec':
      return EC_ALGORITHM[key.asymmetricKeyDetails?.namedCurve ?? ''] === alg;
    case 'ed25519':
      return alg === 'EdDSA';
    default:
      return false;
  }
}

/**
 * What the unverified claims already refuse (expired, not yet valid, another issuer), so such a
 * token costs no signature check. Only ever refuses: the verified claims are checked again.
 */
function unverifiedRefusal(token: string, cfg: AuthConfig, now: number): EdgeError | null {
  let claims: JWTPayload;
  try {
    claims = decodeJwt(token);
  } catch {
    return deny('malformed token');
  }
  const tolerance = cfg.clockToleranceSec * 1000;
  if (typeof claims.exp === 'number' && claims.exp * 1000 <= now - tolerance) return deny('token expired');
  if (typeof claims.nbf === 'number' && claims.nbf * 1000 > now + tolerance) return deny('token not yet valid');
  if (cfg.issuer !== null && (typeof claims.iss !== 'string' || !(Array.isArray(cfg.issuer) ? cfg.issuer : [cfg.issuer]).includes(claims.iss)))
    return deny('wrong issuer');
  return null;
}

/** A short, client-safe reason for a jose failure. */
function reasonFor(err: unknown): string {
  if (err instanceof errors.JWTExpired) return err.claim === 'iat' ? 'token too old' : 'token expired';
  if (err instanceof errors.JWSSignatureVerificationFailed) return 'bad signature';
  if (err instanceof errors.JOSEAlgNotAllowed) return 'algorithm not allowed';
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.claim === 'iss') return 'wrong issuer';
    if (err.claim === 'aud') return 'wrong audience';
    if (err.claim === 'nbf' && err.reason === 'check_failed') return 'token not yet valid';
    if (err.claim === 'exp' && err.reason === 'missing') return 'token has no expiry';
    if (err.claim === 'iat' && err.reason === 'missing') return 'token has no issue time';
    if (err.claim === 'iat' && err.reason === 'check_failed') return 'token issued in the future';
    return 'invalid claims';
  }
  if (err instanceof errors.JWSInvalid || err instanceof errors.JWTInvalid) return 'malformed token';
  return 'invalid token';
}

/**
 * What jose checks of a token's lifetime besides exp/nbf: `exp` present unless requireExp is off,
 * and with maxTokenAgeSec an `iat` no older than that (jose also refuses an `iat` in the future then).
 */
function lifetimeOptions(cfg: AuthConfig): Pick<JWTVerifyOptions, 'requiredClaims' | 'maxTokenAge'> {
  const out: Pick<JWTVerifyOptions, 'requiredClaims' | 'maxTokenAge'> = {};
  if (cfg.requireExp) out.requiredClaims = ['exp'];
  if (cfg.maxTokenAgeSec !== null) out.maxTokenAge = cfg.maxTokenAgeSec;
  return out;
}

/**
 * Reads sub, roles and tenant, refusing claims of the wrong type rather than guessing. Roles come
 * from one claim only, as Queen's broker names them: the list claim (`rolesClaim`, an array; a
 * string too when it is named `role`) when present, else the single-role claim (`roleClaim`, a
 * string). Never both: `role: "admin"` must not widen `roles: ["read-only"]`.
 */
function identityFrom(token: string, payload: JWTPayload, cfg: AuthConfig, now: number): Identity | EdgeError {
  const { sub, exp, iat } = payload;
  if (sub !== undefined && typeof sub !== 'string') return deny('invalid sub claim');
  // jose checks iat only against maxTokenAge; a token dated in the future is refused regardless.
  if (iat !== undefined && iat * 1000 > now + cfg.clockToleranceSec * 1000) return deny('token issued in the future');
  const read = readRoles(payload, cfg.rolesClaim, cfg.roleClaim);
  if (read instanceof EdgeError) return read;
  const tenant = payload[cfg.tenantClaim];
  if (tenant !== undefined && (typeof tenant !== 'string' || tenant === '')) return deny('invalid tenant claim');
  return Object.freeze({
    token,
    sub: sub ?? null,
    roles: read.roles,
    tenant: typeof tenant === 'string' ? tenant : null,
    expMs: exp === undefined ? null : exp * 1000,
    claims: Object.freeze(payload),
    rolesRead: read.from,
  });
}

/** The roles of a verified payload and where they were read (see identityFrom). */
export function readRoles(payload: JWTPayload, listClaim: string, singleClaim: string | null): { roles: Set<string>; from: string } | EdgeError {
  const roles = new Set<string>();
  const listed = payload[listClaim];
  if (listed !== undefined) {
    const stringAllowed = listClaim === SINGLE_ROLE_CLAIM;
    if (stringAllowed && typeof listed === 'string') roles.add(listed);
    else if (Array.isArray(listed) && listed.every((r) => typeof r === 'string')) for (const r of listed as string[]) roles.add(r);
    else return deny('invalid roles claim');
    return { roles, from: `roles read from claim "${listClaim}"` };
  }
  if (singleClaim === null || singleClaim === listClaim) return { roles, from: `no "${listClaim}" claim in the token` };
  const single = payload[singleClaim];
  if (single === undefined) return { roles, from: `no "${listClaim}" or "${singleClaim}" claim in the token` };
  if (typeof single !== 'string') return deny(`invalid ${singleClaim} claim`);
  roles.add(single);
  return { roles, from: `roles read from claim "${singleClaim}" ("${listClaim}" absent)` };
}

/** One signing key of a JWKS and its RFC 7638 thumbprint (null: a key type without one). */
export interface JwksMember {
  readonly jwk: JWK;
  readonly thumbprint: string | null;
}

/** A member as held: its imported key per algorithm, imported on first use. */
interface HeldMember extends JwksMember {
  readonly imported: Map<string, Promise<CryptoKey | null>>;
}

const NO_KEYS: ReadonlySet<string> = new Set();

/** What a set may fetch and hold (`auth.jwks`; a tenant's endpoint also where it may go, jwks-fetch.ts). */
export interface JwksPolicy extends JwksFetchPolicy {
  readonly maxKeys: number;
}

/** The operator's endpoint under the defaults: for a verifier built without a policy. */
const OPERATOR_DEFAULTS: JwksPolicy = { maxBytes: 256 * 1024, maxKeys: 100, tenant: null };

/** The JWKS as last fetched, with the refetch policy described at the top of this file. */
export class JwksKeys {
  readonly #url: string;
  readonly #log: Logger;
  readonly #clock: () => number;
  readonly #policy: JwksPolicy;
  readonly #abort = new AbortController();
  /**
   * The members that may verify a token, by its alg and kid (indexKey): a token's key is found at
   * the same cost in a set of 2 keys as of maxKeys, also when many members share a kid.
   */
  #index = new Map<string, HeldMember[]>();
  readonly #onLoad: ((members: readonly JwksMember[]) => void) | undefined;
  /** Bumped on every successful load, so a waiter can tell whether the set changed under it. */
  #generation = 0;
  /** Whether a set was ever loaded (the keys then serve, stale or not). */
  get #loaded(): boolean {
    return this.#generation > 0;
  }
  #loadedAt = 0;
  #nextFetchAt = 0;
  #inflight: Promise<boolean> | null = null;
  #failures = 0;
  /** Fetches left in the burst, refilled one per JWKS_FETCH_REFILL_MS: however its kids are chosen, a set is fetched that often at most. */
  #fetchTokens = JWKS_FETCH_BURST;
  #fetchTokensAt: number;

  /** `onLoad` sees every newly loaded set before any token is verified with it. */
  constructor(url: string, log: Logger, clock: () => number, onLoad?: (members: readonly JwksMember[]) => void, policy: JwksPolicy = OPERATOR_DEFAULTS) {
    this.#url = url;
    this.#log = log;
    this.#clock = clock;
    this.#onLoad = onLoad;
    this.#policy = policy;
    this.#fetchTokensAt = clock();
  }

  /** Fetches that failed since this set was created (for the JWKS failure counter). */
  get failures(): number {
    return this.#failures;
  }

  /** Fetches now unless a fetch is in flight (joined) or backoff, cooldown or the fetch budget holds; true when keys were loaded. */
  refresh(): Promise<boolean> {
    if (this.#inflight) return this.#inflight;
    if (this.#abort.signal.aborted || this.#clock() < this.#nextFetchAt || !this.#takeFetch()) return Promise.resolve(false);
    this.#inflight = this.#fetch().finally(() => {
      this.#inflight = null;
    });
    return this.#inflight;
  }

  /**
   * The key for `header`, never one whose thumbprint is in `refused()` (read after any refetch: a
   * load may change it). A tenant's set answers every failure to find a key with one text, so the
   * 401 does not tell what its endpoint answered.
   */
  async keyFor(header: ProtectedHeaderParameters, refused: () => ReadonlySet<string> = () => NO_KEYS, watch?: JwksWatch): Promise<CryptoKey | EdgeError> {
    const found = await this.#keyFor(header, refused, watch);
    if (this.#policy.tenant !== null && found instanceof EdgeError && NOT_FOUND.has(found.message)) return deny('unknown key');
    return found;
  }

  close(): void {
    this.#abort.abort();
  }

  async #keyFor(header: ProtectedHeaderParameters, refused: () => ReadonlySet<string>, watch: JwksWatch | undefined): Promise<CryptoKey | EdgeError> {
    if (!this.#loaded) {
      await this.#waitedRefresh(watch);
      if (!this.#loaded) return deny('verification keys unavailable');
    } else if (this.#clock() - this.#loadedAt >= JWKS_MAX_AGE_MS) {
      // Background: the loaded keys keep serving while the refresh runs (or fails).
      void this.refresh();
    }
    const generation = this.#generation;
    const first = await this.#find(header, refused());
    if (first !== undefined) return first;
    // Someone else's refetch may have landed while we looked; only fetch if the set is unchanged.
    if (this.#generation === generation && !(await this.#waitedRefresh(watch))) return deny('unknown key');
    const second = await this.#find(header, refused());
    if (second !== undefined) return second;
    this.#nextFetchAt = Math.max(this.#nextFetchAt, this.#clock() + JWKS_COOLDOWN_MS);
    return deny('unknown key');
  }

  /**
   * The key for the header; undefined when no member matches; EdgeError when the match is
   * unusable. Costs one map lookup and at most `refused.size + 1` members, whatever the set's size.
   */
  async #find(header: ProtectedHeaderParameters, refused: ReadonlySet<string>): Promise<CryptoKey | EdgeError | undefined> {
    const alg = header.alg as string;
    const candidates = this.#index.get(indexKey(alg, header.kid));
    if (candidates === undefined) return undefined;
    // More candidates than refused keys plus one: ambiguous whichever are refused.
    if (candidates.length > refused.size + 1) return deny('ambiguous key: token needs a kid');
    const usable = candidates.filter((m) => m.thumbprint === null || !refused.has(m.thumbprint));
    // A refused key is known, not missing: no refetch, and a reason the client can act on.
    if (usable.length === 0) return deny('key not trusted for this tenant');
    if (usable.length > 1) return deny('ambiguous key: token needs a kid');
    const member = usable[0]!;
    let key = member.imported.get(alg);
    if (key === undefined) {
      key = importJWK(member.jwk, alg).then(
        (k) => (k instanceof Uint8Array ? null : k),
        () => null,
      );
      member.imported.set(alg, key);
    }
    return (await key) ?? deny('unknown key');
  }

  /** A refresh this verification waits for: a fetch it started or joined is told to `watch`. */
  async #waitedRefresh(watch: JwksWatch | undefined): Promise<boolean> {
    const refreshed = this.refresh();
    if (watch === undefined || this.#inflight === null) return refreshed;
    const since = performance.now();
    const loaded = await refreshed;
    watch.jwksFetched(since, loaded);
    return loaded;
  }

  #takeFetch(): boolean {
    const periods = Math.floor((this.#clock() - this.#fetchTokensAt) / JWKS_FETCH_REFILL_MS);
    if (periods > 0) {
      this.#fetchTokens = Math.min(JWKS_FETCH_BURST, this.#fetchTokens + periods);
      this.#fetchTokensAt += periods * JWKS_FETCH_REFILL_MS;
    }
    if (this.#fetchTokens === 0) return false;
    this.#fetchTokens--;
    return true;
  }

  async #fetch(): Promise<boolean> {
    let doc: unknown;
    try {
      doc = await fetchJwksDocument(this.#url, this.#policy, AbortSignal.any([this.#abort.signal, AbortSignal.timeout(JWKS_FETCH_TIMEOUT_MS)]));
    } catch (err) {
      return this.#failed((err as Error).message);
    }
    const keys = signingKeys(doc, this.#policy.maxKeys);
    if (typeof keys === 'string') return this.#failed(keys);
    const members = keys.map((jwk): HeldMember => ({ jwk, thumbprint: jwkThumbprint(jwk), imported: new Map() }));
    const index = new Map<string, HeldMember[]>();
    const add = (key: string, m: HeldMember): void => {
      const same = index.get(key);
      if (same === undefined) index.set(key, [m]);
      else same.push(m);
    };
    for (const m of members) {
      for (const alg of ASYMMETRIC_ALGORITHMS) {
        if (!memberSuits(m.jwk, alg)) continue;
        add(indexKey(alg, undefined), m);
        if (typeof m.jwk.kid === 'string') add(indexKey(alg, m.jwk.kid), m);
      }
    }
    this.#index = index;
    this.#onLoad?.(members);
    this.#generation++;
    this.#loadedAt = this.#clock();
    this.#log.info({ jwksUrl: this.#url, keys: keys.length }, 'JWKS loaded');
    return true;
  }

  #failed(reason: string): false {
    this.#nextFetchAt = this.#clock() + JWKS_FAILURE_BACKOFF_MS;
    if (!this.#abort.signal.aborted) {
      this.#failures++;
      this.#log.warn({ jwksUrl: this.#url, reason, staleKeys: this.#loaded }, 'JWKS fetch failed; keeping the keys already loaded');
    }
    return false;
  }
}

/** Refusals a tenant's set answers with one text (see JwksKeys.keyFor). */
const NOT_FOUND: ReadonlySet<string> = new Set(['unknown key', 'verification keys unavailable']);

/** The algorithms a JWKS member can verify (memberSuits). */
const ASYMMETRIC_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const;

/** The index entry of a token's alg and kid; a token without a kid may use any member that suits its alg. */
function indexKey(alg: string, kid: string | undefined): string {
  return kid === undefined ? `${alg} *` : `${alg} kid:${kid}`;
}

/** Curve of each ES* algorithm, as a JWK names it. */
const JWK_CURVE: Readonly<Record<string, string>> = { ES256: 'P-256', ES384: 'P-384', ES512: 'P-521' };

/** True when `jwk` may verify a token signed with `alg` (what jose's local JWKS matches on). */
function memberSuits(jwk: JWK, alg: string): boolean {
  if (jwk.alg !== undefined && jwk.alg !== alg) return false;
  if (jwk.use !== undefined && jwk.use !== 'sig') return false;
  if (Array.isArray(jwk.key_ops) && !jwk.key_ops.includes('verify')) return false;
  if (alg.startsWith('RS') || alg.startsWith('PS')) return jwk.kty === 'RSA';
  if (alg.startsWith('ES')) return jwk.kty === 'EC' && jwk.crv === JWK_CURVE[alg];
  if (alg === 'EdDSA') return jwk.kty === 'OKP' && (jwk.crv === 'Ed25519' || jwk.crv === 'Ed448');
  return false;
}

/** The public asymmetric members of a JWKS document; a reason (for the log) when it is not one or has more than `maxKeys` members. */
function signingKeys(doc: unknown, maxKeys: number): JWK[] | string {
  if (typeof doc !== 'object' || doc === null) return 'not a JSON Web Key Set';
  const { keys } = doc as { keys?: unknown };
  if (!Array.isArray(keys)) return 'not a JSON Web Key Set';
  if (keys.length > maxKeys) return `${keys.length} keys, more than auth.jwks.maxKeys (${maxKeys})`;
  // `oct` members (secrets) and private members never verify anything here.
  return keys.filter((k): k is JWK => typeof k === 'object' && k !== null && (k.kty === 'RSA' || k.kty === 'EC' || k.kty === 'OKP') && k.d === undefined);
}
