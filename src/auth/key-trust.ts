/**
 * What a set of token settings trusts, as key material rather than configuration text
 * (docs/tenancy.md, "Key trust"): two settings trust the same tokens when they share a key and
 * neither the issuer nor the audience tells their tokens apart. Text would be fooled by the same
 * JWKS under another spelling (`?x`, `#x`, `LOCALHOST`, `127.0.0.1` for `localhost`, `:443`) or the
 * same key in another file or encoding.
 *
 * - HMAC secrets: the key HMAC really uses, per hash (RFC 2104: a key longer than the hash's
 *   block is hashed first, a shorter one is zero-padded to the block), hashed. `secret\0` and
 *   `secret` are one HMAC key: comparing the bytes as given would take them for two.
 * - Public keys (PEM text or a JWK; key files are read in when the configuration is loaded,
 *   key-files.ts): the RFC 7638 thumbprint of the key.
 * - JWKS endpoints: the canonical URL (lower-case host without a trailing dot, no user info,
 *   fragment or query, default port dropped, every loopback name one host). The query is dropped
 *   on purpose: endpoints that differ only there are taken for one key source; tenants sharing an
 *   IdP tell their tokens apart by issuer or audience. The keys a JWKS serves are compared by
 *   thumbprint when fetched (verifiers.ts).
 */
import { createHash } from 'node:crypto';
import type { JWK } from 'jose';
import type { RawTenantAuth } from '../config/schema.js';
import { defaultPort, urlHost, urlPort } from '../net/url-host.js';
import { isInlineKey, parsePublicKey } from './key-files.js';

/** What decides which tokens a set of `auth` settings accepts (a tenant's own, or the global ones). */
export type TrustSettings = Pick<RawTenantAuth, 'secret' | 'publicKey' | 'jwksUrl' | 'issuer' | 'audience'>;

/** The JWKS URL as compared (see the top of this file); the text itself when it does not parse. */
export function canonicalJwksUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return text;
  }
  const port = defaultPort(url) ? '' : `:${urlPort(url)}`;
  const path = url.pathname.length > 1 ? url.pathname.replace(/\/+$/, '') : url.pathname;
  return `${url.protocol}//${urlHost(url)}${port}${path}`;
}

/** Members of a public JWK that its RFC 7638 thumbprint covers, by key type. */
const THUMBPRINT_MEMBERS: Readonly<Record<string, readonly string[]>> = { RSA: ['e', 'kty', 'n'], EC: ['crv', 'kty', 'x', 'y'], OKP: ['crv', 'kty', 'x'] };

/** The RFC 7638 SHA-256 thumbprint (base64url) of a public JWK; null for a key type or member set it does not cover. */
export function jwkThumbprint(jwk: JWK): string | null {
  const members = jwk.kty === undefined ? undefined : THUMBPRINT_MEMBERS[jwk.kty];
  if (members === undefined) return null;
  const required: Record<string, string> = {};
  for (const m of members) {
    const v = (jwk as Record<string, unknown>)[m];
    if (typeof v !== 'string') return null;
    required[m] = v;
  }
  // Members in lexicographic order, no whitespace: JSON.stringify of an object built in that order.
  return createHash('sha256').update(JSON.stringify(required)).digest('base64url');
}

/** The key material of a `publicKey` setting: the thumbprint of the key it holds (PEM text or a JWK). */
function publicKeyMaterial(value: string): string {
  if (!isInlineKey(value)) return `file:${value}`;
  try {
    const key = parsePublicKey(value.trim());
    const thumbprint = jwkThumbprint(key.export({ format: 'jwk' }) as JWK);
    if (thumbprint !== null) return `jwk:${thumbprint}`;
  } catch {
    // Not a key: the verifier refuses every token anyway.
  }
  return `text:${createHash('sha256').update(value).digest('base64url')}`;
}

/** Key sets by settings object: one directory build compares every pair of tenants, and should parse each key once. */
const known = new WeakMap<TrustSettings, ReadonlySet<string>>();

/** The key material `s` trusts: `hmac:<alg>:<hash>` (hmacKeys), `jwk:<thumbprint>` (public key) and `jwks:<canonical URL>`. */
export function trustedKeys(s: TrustSettings): ReadonlySet<string> {
  const cached = known.get(s);
  if (cached !== undefined) return cached;
  const keys = new Set<string>();
  if (s.secret !== null) for (const k of hmacKeys(s.secret)) keys.add(k);
  if (s.publicKey !== null) keys.add(publicKeyMaterial(s.publicKey));
  if (s.jwksUrl !== null) keys.add(`jwks:${canonicalJwksUrl(s.jwksUrl)}`);
  known.set(s, keys);
  return keys;
}

/** The hash and block size (bytes) of each HMAC algorithm a secret may verify. */
const HMAC_HASHES: ReadonlyArray<readonly [alg: string, hash: string, block: number]> = [
  ['HS256', 'sha256', 64],
  ['HS384', 'sha384', 128],
  ['HS512', 'sha512', 128],
];

/** `hmac:<alg>:<hash of the padded key>` for each HMAC algorithm: what a secret is as that algorithm's key. */
export function hmacKeys(secret: string): string[] {
  const raw = Buffer.from(new TextEncoder().encode(secret));
  return HMAC_HASHES.map(([alg, hash, block]) => {
    const padded = Buffer.alloc(block);
    (raw.length > block ? createHash(hash).update(raw).digest() : raw).copy(padded);
    return `hmac:${alg}:${createHash('sha256').update(padded).digest('base64url')}`;
  });
}

/** True when the issuer or the audience tells the two settings' tokens apart (both set, no value in common). */
export function separable(a: TrustSettings, b: TrustSettings): boolean {
  return disjoint(a.issuer, b.issuer) || disjoint(a.audience, b.audience);
}

/**
 * True when one token could verify under both `a` and `b`: they share key material and neither
 * the issuer nor the audience tells their tokens apart. Two tenants, or a tenant and the global
 * settings, that trust alike would accept each other's tokens, claimless ones included, so the
 * directory refuses such a tenant (docs/tenancy.md).
 */
export function sameTrust(a: TrustSettings, b: TrustSettings): boolean {
  if (separable(a, b)) return false;
  const bKeys = trustedKeys(b);
  for (const k of trustedKeys(a)) if (bKeys.has(k)) return true;
  return false;
}

/** Both claim settings given and without a value in common (a token cannot satisfy both). */
function disjoint(a: string | string[] | null, b: string | string[] | null): boolean {
  if (a === null || b === null) return false;
  const bs = Array.isArray(b) ? b : [b];
  return !(Array.isArray(a) ? a : [a]).some((v) => bs.includes(v));
}
