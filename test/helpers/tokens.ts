/**
 * Test keys and tokens: key pairs in every form a config may name (CryptoKey, JWK, PEM), signed
 * tokens for each algorithm, and hand-crafted hostile ones (alg none, HMAC keyed with a public key).
 */
import { createHmac, randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, exportPKCS8, exportSPKI, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

/** Asymmetric algorithms the helpers can generate keys for. */
export type AsymmetricAlg = 'RS256' | 'RS384' | 'RS512' | 'PS256' | 'PS384' | 'PS512' | 'ES256' | 'ES384' | 'ES512' | 'EdDSA';

/** A generated key pair with its public half as a JWK (kid, alg, use set) and both halves as PEM. */
export interface TestKeyPair {
  readonly alg: AsymmetricAlg;
  readonly kid: string;
  readonly privateKey: CryptoKey;
  readonly publicKey: CryptoKey;
  readonly publicJwk: JWK;
  readonly spkiPem: string;
  readonly pkcs8Pem: string;
}

/** Generates a key pair for `alg`; the kid defaults to a unique one. */
export async function keyPair(alg: AsymmetricAlg, kid = `${alg}-${randomUUID()}`): Promise<TestKeyPair> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { alg, kid, privateKey, publicKey, publicJwk, spkiPem: await exportSPKI(publicKey), pkcs8Pem: await exportPKCS8(privateKey) };
}

/** Options for signToken: the alg, an optional kid, and extra protected-header fields. */
export interface SignOptions {
  alg: string;
  kid?: string;
  header?: Record<string, unknown>;
}

/** Signs `claims` as a compact JWT; a string key is used as an HMAC secret. */
export function signToken(claims: JWTPayload, key: CryptoKey | Uint8Array | string, opts: SignOptions): Promise<string> {
  const header = { ...opts.header, alg: opts.alg, typ: 'JWT', ...(opts.kid === undefined ? {} : { kid: opts.kid }) };
  return new SignJWT(claims).setProtectedHeader(header).sign(typeof key === 'string' ? new TextEncoder().encode(key) : key);
}

/** Signs with a generated pair, putting its kid in the header. */
export function signWith(pair: TestKeyPair, claims: JWTPayload, header?: Record<string, unknown>): Promise<string> {
  return signToken(claims, pair.privateKey, { alg: pair.alg, kid: pair.kid, ...(header ? { header } : {}) });
}

/** base64url of a JSON value. */
export function b64json(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

/** Assembles a compact token from raw parts, valid or not. */
export function craftToken(header: unknown, payload: unknown, signature = ''): string {
  return `${b64json(header)}.${b64json(payload)}.${signature}`;
}

/** An unsecured token (`alg: none`, empty signature). */
export function algNoneToken(claims: JWTPayload, alg = 'none'): string {
  return craftToken({ alg, typ: 'JWT' }, claims);
}

/**
 * The alg-confusion attack: an HS256 token whose HMAC key is the verifier's public key PEM text.
 * Signed with node:crypto, so the forgery does not depend on the library under test.
 */
export function hmacWithPublicKey(claims: JWTPayload, publicPem: string, kid?: string): string {
  const input = `${b64json({ alg: 'HS256', typ: 'JWT', ...(kid === undefined ? {} : { kid }) })}.${b64json(claims)}`;
  return `${input}.${createHmac('sha256', publicPem).update(input).digest('base64url')}`;
}

/** Replaces the signature with one of the same length that does not verify. */
export function tamperSignature(token: string): string {
  const dot = token.lastIndexOf('.');
  const sig = Buffer.from(token.slice(dot + 1), 'base64url');
  sig[0] = (sig[0] ?? 0) ^ 0xff;
  return `${token.slice(0, dot + 1)}${sig.toString('base64url')}`;
}

/** Seconds since the epoch for a millisecond clock reading. */
export function epochSec(ms: number): number {
  return Math.floor(ms / 1000);
}

/** A temporary directory for key files; remove() deletes it. */
export interface TempDir {
  readonly path: string;
  write(name: string, text: string): Promise<string>;
  remove(): Promise<void>;
}

/** Creates a temporary directory under the OS tmpdir. */
export async function tempDir(): Promise<TempDir> {
  const path = await mkdtemp(join(tmpdir(), 'queen-edge-test-'));
  return {
    path,
    async write(name, text) {
      const file = join(path, name);
      await writeFile(file, text);
      return file;
    },
    remove: () => rm(path, { recursive: true, force: true }),
  };
}
