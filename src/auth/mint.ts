/**
 * Upstream identity in `mint` mode (docs/security.md): the edge signs a short-lived token for the broker
 * carrying the verified caller's `sub`, `roles` and tenant.
 *
 * Only the four role names the broker knows are carried (anything else in the client's roles claim
 * is dropped, never passed on for a broker to interpret), and a minted token never outlives the
 * client token it stands for: its exp is capped at the client token's.
 *
 * Minted headers are cached per (sub, roles, client exp, tenant) and reused until shortly before they expire
 * (REFRESH_MARGIN_MS or 10% of the ttl, whichever is smaller), so a hit is a Map lookup and the
 * broker never receives a token about to lapse in transit. Concurrent misses for one identity
 * share one signature. The cache is bounded and evicts in insertion order: every entry lives at
 * most ttlSec, so the oldest insert is also the nearest to being useless.
 */
import { readFile } from 'node:fs/promises';
import { importPKCS8, SignJWT, type CryptoKey } from 'jose';
import { ExpiringMap } from '../cache/expiring-map.js';
import { ROLE_NAMES, type RawConfig } from '../config/schema.js';
import type { Identity } from './jwt.js';

type MintConfig = RawConfig['upstreamIdentity']['mint'];

const KNOWN_ROLES: ReadonlySet<string> = new Set(ROLE_NAMES);

/** Minted headers kept at most. */
const MINT_CACHE_SIZE = 10_000;
/** A cached token is replaced at the latest this long before its exp. */
const REFRESH_MARGIN_MS = 30_000;

/** Produces the broker's Authorization header for a verified caller. */
export interface UpstreamMinter {
  /** `Bearer <jwt>` with sub, roles, tenant (= tenantId), iss, iat, exp; sync on a cache hit, a Promise on a miss. */
  authorizationFor(identity: Identity, tenantId: string): string | Promise<string>;
}

/** Loads the signing key (throws on a missing secret or unreadable key: a configuration error). */
export async function createMinter(cfg: MintConfig, deps: { clock?: () => number }): Promise<UpstreamMinter> {
  return new Minter(cfg, await signingKey(cfg), deps.clock ?? Date.now);
}

async function signingKey(cfg: MintConfig): Promise<Uint8Array | CryptoKey> {
  if (cfg.algorithm.startsWith('HS')) {
    if (!cfg.secret) throw new Error(`upstreamIdentity.mint: ${cfg.algorithm} needs a secret`);
    return new TextEncoder().encode(cfg.secret);
  }
  if (!cfg.privateKey) throw new Error(`upstreamIdentity.mint: ${cfg.algorithm} needs privateKey (a PKCS#8 PEM file)`);
  return importPKCS8(await readFile(cfg.privateKey, 'utf8'), cfg.algorithm);
}

class Minter implements UpstreamMinter {
  readonly #cfg: MintConfig;
  readonly #key: Uint8Array | CryptoKey;
  readonly #clock: () => number;
  readonly #marginMs: number;
  /** Authorization header by identity and tenant, until its refresh time; oldest insert evicted first. */
  readonly #cache = new ExpiringMap<string, string>(MINT_CACHE_SIZE);
  readonly #pending = new Map<string, Promise<string>>();
  /** Identities come from the verifier's cache, so memoising their (sub, roles) key spares a sort per request. */
  readonly #identityKeys = new WeakMap<Identity, string>();

  constructor(cfg: MintConfig, key: Uint8Array | CryptoKey, clock: () => number) {
    this.#cfg = cfg;
    this.#key = key;
    this.#clock = clock;
    this.#marginMs = Math.min(REFRESH_MARGIN_MS, cfg.ttlSec * 100);
  }

  authorizationFor(identity: Identity, tenantId: string): string | Promise<string> {
    let identityKey = this.#identityKeys.get(identity);
    if (identityKey === undefined) {
      identityKey = JSON.stringify([identity.sub, sortedRoles(identity), identity.expMs]);
      this.#identityKeys.set(identity, identityKey);
    }
    // A JSON array is self-delimiting, so appending the tenant id keeps keys unambiguous.
    const cacheKey = identityKey + tenantId;
    const now = this.#clock();
    const hit = this.#cache.get(cacheKey, now);
    if (hit !== undefined) return hit;
    return this.#pending.get(cacheKey) ?? this.#mint(cacheKey, identity, tenantId, now);
  }

  #mint(cacheKey: string, identity: Identity, tenant: string, now: number): Promise<string> {
    const { sub } = identity;
    const roles = sortedRoles(identity);
    const iat = Math.floor(now / 1000);
    const exp = identity.expMs === null ? iat + this.#cfg.ttlSec : Math.min(iat + this.#cfg.ttlSec, Math.floor(identity.expMs / 1000));
    const jwt = new SignJWT({ roles, tenant })
      .setProtectedHeader({ alg: this.#cfg.algorithm, typ: 'JWT' })
      .setIssuer(this.#cfg.issuer)
      .setIssuedAt(iat)
      .setExpirationTime(exp);
    if (sub !== null) jwt.setSubject(sub);
    const minted = jwt
      .sign(this.#key)
      .then((token) => {
        const header = `Bearer ${token}`;
        this.#cache.set(cacheKey, header, exp * 1000 - this.#marginMs, this.#clock());
        return header;
      })
      .finally(() => this.#pending.delete(cacheKey));
    this.#pending.set(cacheKey, minted);
    return minted;
  }
}

function sortedRoles(identity: Identity): string[] {
  return [...identity.roles].filter((r) => KNOWN_ROLES.has(r)).sort();
}
