/**
 * One token verifier per trust domain: the global `auth` settings, and each tenant that brings
 * its own identity provider (`tenants.<id>.auth`, docs/tenancy.md). A tenant verifier knows only
 * that tenant's key, issuer and audience, so one tenant's keys never verify a token for another.
 *
 * Not shared: the token cache. Each verifier has its own share, bounded in entries and bytes
 * (`auth.cacheSize`, and `auth.cacheBytes` for the global settings, `auth.tenantCacheBytes` for each
 * tenant's), so a tenant whose IdP mints many large tokens only evicts its own. Shared: one JWKS set
 * per distinct URL, with jwt.ts's single-flight and stale-on-error policy; every set loaded is
 * screened for keys a trust domain configured earlier holds (key-claims.ts). sync() drops the
 * verifiers and JWKS sets that no current tenant (nor the global settings) uses, so their number
 * is bounded by the directory.
 */
import { decodeJwt } from 'jose';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { AuthConfig, RawTenantAuth } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import { foldByLabel } from '../observability/tenant-labels.js';
import { createTokenVerifier, JwksKeys, tokenCache, type KeyContext, type TokenVerifier } from './jwt.js';
import { KeyClaims, type DomainOrigin } from './key-claims.js';

/** Where a tenant's settings come from and, for a record, when its `auth` was written (ms; undefined: not known). */
export interface DomainRank {
  readonly origin: DomainOrigin;
  readonly since?: number;
}

/** The part of a tenant the verifiers read. */
export interface AuthScope {
  readonly id: string;
  readonly auth: Readonly<RawTenantAuth> | null;
}

export interface TenantVerifiers {
  /** The global settings' verifier (tenants without their own `auth`). */
  readonly global: TokenVerifier;
  /** The verifier for tokens presented to `tenant`: its own settings when it has them, else the global ones. */
  forTenant(tenant: AuthScope): TokenVerifier;
  /**
   * Forgets the verifiers and JWKS sets of tenants that are gone or changed their settings, and
   * starts fetching the sets of new ones in the background (a slow IdP then delays no request).
   * `rank` tells the file's tenants from records and a record's age (key-claims.ts: who keeps a
   * key two tenants hold); the tenants come in the directory's order (the file's in file order).
   */
  sync(tenants: Iterable<AuthScope>, rank?: (id: string) => DomainRank): void;
  /** Starts the global verifier (tenant verifiers load their keys on first use). */
  start(): Promise<void>;
  /**
   * Takes new global settings (a configuration reload): a new global verifier is started (its PEM
   * key read again, its JWKS pre-warmed) and only then replaces the old one, with a fresh cache
   * share; tenant verifiers, which inherit global settings, are rebuilt on their next use (their
   * PEM files read again too). Resolves with the function that makes the change; rejects, changing
   * nothing, when the new key is unusable.
   */
  reconfigure(cfg: AuthConfig): Promise<() => void>;
  /**
   * Signature checks and token-cache bytes, by trust domain (`tenant` label: the tenant's id, or
   * "" for the global settings), read at scrape time.
   */
  registerMetrics(registry: Registry, tenantLabel?: (id: string) => string): void;
  /** Failed fetches of each JWKS URL in use (the global one and tenants' own). */
  jwksFailures(): ReadonlyMap<string, number>;
  close(): void;
}

export function createTenantVerifiers(cfg: AuthConfig, deps: { log: Logger; clock?: () => number }): TenantVerifiers {
  return new Verifiers(cfg, deps.log, deps.clock ?? Date.now);
}

/** The global settings with a tenant's own in place of the keys, issuer and audience: nothing else is inherited. */
export function tenantAuthConfig(global: AuthConfig, own: Readonly<RawTenantAuth>): AuthConfig {
  return {
    ...global,
    algorithms: own.algorithms ?? global.algorithms,
    rolesClaim: own.rolesClaim ?? global.rolesClaim,
    roleClaim: own.roleClaim === undefined ? global.roleClaim : own.roleClaim,
    secret: own.secret,
    publicKey: own.publicKey,
    jwksUrl: own.jwksUrl,
    issuer: own.issuer,
    audience: own.audience,
  };
}

/**
 * The tenant a token names, read WITHOUT verifying it: only to choose whose keys verify it when
 * the host names no tenant. The verified claim is checked again afterwards.
 */
export function unverifiedTenantClaim(token: string, claim: string): string | null {
  // Not three dot-separated parts (an API key, junk): no claim, without the cost of the decoder's
  // throw (about 8 µs a request).
  const first = token.indexOf('.');
  const second = first < 0 ? -1 : token.indexOf('.', first + 1);
  if (second < 0 || token.includes('.', second + 1)) return null;
  try {
    const value = decodeJwt(token)[claim];
    return typeof value === 'string' && value !== '' ? value : null;
  } catch {
    return null;
  }
}

interface Own {
  readonly sig: string;
  auth: Readonly<RawTenantAuth>;
  readonly verifier: TokenVerifier;
}

class Verifiers implements TenantVerifiers {
  global: TokenVerifier;
  #cfg: AuthConfig;
  readonly #log: Logger;
  readonly #clock: () => number;
  readonly #jwks = new Map<string, JwksKeys>();
  readonly #own = new Map<string, Own>();
  /** Signature checks by trust domain ('' = global), kept across a tenant's re-keying; bounded by the directory. */
  readonly #checks = new Map<string, number>();
  readonly #claims: KeyClaims;

  constructor(cfg: AuthConfig, log: Logger, clock: () => number) {
    this.#cfg = cfg;
    this.#log = log;
    this.#clock = clock;
    this.#claims = new KeyClaims(log);
    this.#claims.set('', cfg, 'global');
    this.global = createTokenVerifier(cfg, { log, clock, keys: this.#context('', cfg.cacheBytes) });
  }

  forTenant(tenant: AuthScope): TokenVerifier {
    const auth = tenant.auth;
    if (auth === null) return this.global;
    const known = this.#own.get(tenant.id);
    if (known !== undefined) {
      // Unchanged tenants keep their compiled object, so this is the common case.
      if (known.auth === auth) return known.verifier;
      if (known.sig === JSON.stringify(auth)) {
        known.auth = auth;
        return known.verifier;
      }
    }
    // A tenant not yet synced (a record, as far as is known): its keys may already be held by another
    // domain. One synced already (its verifier dropped by a reconfigure) changes nothing: no rescreen,
    // which costs every domain's keys, per tenant on its first request.
    if (this.#claims.set(tenant.id, auth)) this.#claims.rescreen();
    const verifier = createTokenVerifier(tenantAuthConfig(this.#cfg, auth), {
      log: this.#log,
      clock: this.#clock,
      keys: this.#context(tenant.id, this.#cfg.tenantCacheBytes),
    });
    this.#own.set(tenant.id, { sig: JSON.stringify(auth), auth, verifier });
    return verifier;
  }

  sync(tenants: Iterable<AuthScope>, rank: (id: string) => DomainRank = () => ({ origin: 'record' })): void {
    const live = new Map<string, string>();
    const urls = new Set<string>();
    if (this.#cfg.jwksUrl) urls.add(this.#cfg.jwksUrl);
    let order = 0;
    for (const t of tenants) {
      if (t.auth === null) continue;
      live.set(t.id, JSON.stringify(t.auth));
      const { origin, since } = rank(t.id);
      this.#claims.set(t.id, t.auth, origin, origin === 'file' ? order : since);
      order++;
      if (t.auth.jwksUrl) urls.add(t.auth.jwksUrl);
    }
    for (const [id, own] of this.#own) if (live.get(id) !== own.sig) this.#own.delete(id);
    this.#claims.retain(new Set(live.keys()));
    for (const id of this.#checks.keys()) if (id !== '' && !live.has(id)) this.#checks.delete(id);
    for (const [url, keys] of this.#jwks) {
      if (urls.has(url)) continue;
      keys.close();
      this.#jwks.delete(url);
      this.#claims.loaded(url, null);
    }
    // Keys already loaded are owned again by the domains as they now are.
    this.#claims.rescreen();
    for (const url of urls) if (!this.#jwks.has(url)) void this.#jwksFor(url).refresh();
  }

  start(): Promise<void> {
    return this.global.start();
  }

  async reconfigure(cfg: AuthConfig): Promise<() => void> {
    const next = createTokenVerifier(cfg, { log: this.#log, clock: this.#clock, keys: this.#context('', cfg.cacheBytes, cfg) });
    await next.start();
    return () => {
      this.#cfg = cfg;
      if (this.#claims.set('', cfg)) this.#claims.rescreen();
      this.global = next;
      this.#own.clear();
    };
  }

  close(): void {
    for (const keys of this.#jwks.values()) keys.close();
    this.#jwks.clear();
    this.#own.clear();
  }

  /** A new verifier's keys: a fresh cache share (changed settings never reuse old entries) and the shared JWKS sets. */
  #context(domain: string, cacheBytes: number, cfg: AuthConfig = this.#cfg): KeyContext {
    return {
      cache: tokenCache(cfg.cacheSize, cacheBytes),
      jwks: (url) => this.#jwksFor(url),
      checked: () => this.#checks.set(domain, (this.#checks.get(domain) ?? 0) + 1),
      refusedKeys: () => this.#claims.refused(domain),
    };
  }

  /** `tenantLabel` folds tenant ids into the label values /metrics may show (observability/tenant-labels.ts). */
  registerMetrics(registry: Registry, tenantLabel: (id: string) => string = (id) => id): void {
    const checks = this.#checks;
    const shares = (): Iterable<[string, TokenVerifier]> => [['', this.global], ...[...this.#own].map(([id, o]): [string, TokenVerifier] => [id, o.verifier])];
    new Counter({
      name: 'queen_edge_token_verifications_total',
      help: 'Token signature checks (verified-token cache misses that reached a key), by tenant with its own auth ("" = the global settings).',
      labelNames: ['tenant'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const [tenant, n] of checks) this.inc({ tenant: tenantLabel(tenant) }, n);
      },
    });
    new Gauge({
      name: 'queen_edge_token_cache_bytes',
      help: 'Estimated bytes held by each share of the verified-token cache, by tenant with its own auth ("" = the global settings).',
      labelNames: ['tenant'] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const [tenant, n] of foldByLabel(shares(), tenantLabel, (v) => v.cacheBytes)) this.set({ tenant }, n);
      },
    });
  }

  jwksFailures(): ReadonlyMap<string, number> {
    return new Map([...this.#jwks].map(([url, keys]) => [url, keys.failures]));
  }

  #jwksFor(url: string): JwksKeys {
    let keys = this.#jwks.get(url);
    if (keys === undefined) {
      // The operator's own endpoint may be anywhere; a tenant's is held to auth.jwks (jwks-fetch.ts).
      const { maxBytes, maxKeys, allowHttp, allowPrivateAddresses } = this.#cfg.jwks;
      const tenant = url === this.#cfg.jwksUrl ? null : { allowHttp, allowPrivateAddresses };
      keys = new JwksKeys(url, this.#log, this.#clock, (members) => this.#claims.loaded(url, members), { maxBytes, maxKeys, tenant });
      this.#jwks.set(url, keys);
    }
    return keys;
  }
}
