/**
 * The form of a tenant API key (docs/api-keys.md): `qe_<id>_<secret>`. The `qe_` prefix tells the
 * request path a key from a JWT (which starts `eyJ`) without parsing, and lets secret scanners find
 * a leaked one; the id (12 lower-case base32 characters, 60 bits) names the key in lists, logs and
 * the directory; the secret is 32 random bytes (256 bits) in base64url. Only the SHA-256 of the
 * whole key is stored: with 256 bits of randomness a fast hash is enough (nothing to brute-force),
 * and it is compared in constant time.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export const KEY_PREFIX = 'qe_';
const ID_LENGTH = 12;
const SECRET_BYTES = 32;
/** `qe_` + id + `_` + 43 base64url characters. */
export const KEY_LENGTH = KEY_PREFIX.length + ID_LENGTH + 1 + Math.ceil((SECRET_BYTES * 4) / 3);
const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';
const ID = /^[a-z2-7]{12}$/;
const SECRET = /^[A-Za-z0-9_-]{43}$/;

/** Whether a bearer credential is an API key (by its prefix; its form is checked by keyId). */
export function isApiKey(token: string): boolean {
  return token.startsWith(KEY_PREFIX);
}

/** A key id in its stored form, or false for anything that is not one. */
export function isKeyId(id: string): boolean {
  return ID.test(id);
}

/** The id of a well-formed key, or null. */
export function keyId(key: string): string | null {
  if (key.length !== KEY_LENGTH || key.charCodeAt(KEY_PREFIX.length + ID_LENGTH) !== 95 /* _ */) return null;
  const id = key.slice(KEY_PREFIX.length, KEY_PREFIX.length + ID_LENGTH);
  return ID.test(id) && SECRET.test(key.slice(KEY_PREFIX.length + ID_LENGTH + 1)) ? id : null;
}

/** The stored form of a key: its SHA-256, hex. */
export function keyHash(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** Constant-time comparison of a presented key with a stored hash (both digests have one length). */
export function keyMatches(key: string, storedHash: string): boolean {
  const stored = Buffer.from(storedHash, 'hex');
  const presented = createHash('sha256').update(key).digest();
  return stored.length === presented.length && timingSafeEqual(stored, presented);
}

/** A new key: its id, the key (shown once) and the hash to store. */
export function mintKey(): { readonly id: string; readonly key: string; readonly hash: string } {
  const raw = randomBytes(ID_LENGTH);
  let id = '';
  for (const b of raw) id += BASE32[b & 31];
  const key = `${KEY_PREFIX}${id}_${randomBytes(SECRET_BYTES).toString('base64url')}`;
  return { id, key, hash: keyHash(key) };
}
