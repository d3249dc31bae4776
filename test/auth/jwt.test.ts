import { createHmac, generateKeyPairSync } from 'node:crypto';
import { importPKCS8, type JWTPayload } from 'jose';
import { generate as selfSigned } from 'selfsigned';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { bearerToken, createTokenVerifier, wellFormedToken, type Identity, type TokenVerifier } from '../../src/auth/jwt.js';
import { parseConfig } from '../../src/config/load.js';
import type { AuthConfig } from '../../src/config/schema.js';
import { EdgeError } from '../../src/errors.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { capturingLogger } from '../helpers/logs.js';
import {
  algNoneToken,
  b64json,
  craftToken,
  epochSec,
  hmacWithPublicKey,
  keyPair,
  signToken,
  signWith,
  tamperSignature,
  tempDir,
  type TempDir,
  type TestKeyPair,
} from '../helpers/tokens.js';

const SECRET = 'test-secret-with-enough-entropy-0123456789';
const ALL_ALGS = ['HS256', 'HS384', 'HS512', 'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const;

/** The `auth:` section as the loader produces it, from a minimal valid file. */
function authConfig(auth: Record<string, unknown>): AuthConfig {
  const plan = {
    limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
    quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
    storageBytes: 0,
  };
  return parseConfig({ auth, plans: { free: plan }, tenants: { t1: { plan: 'free', brokers: ['http://127.0.0.1:6632'] } } }, {}).auth;
}

/** A logger whose lines land in `lines`, parsed. */

/** A clock the test moves by hand. */
function manualClock(start = Date.now()): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return {
    now: () => t,
    advance: (ms) => {
      t += ms;
    },
  };
}

function expectIdentity(result: Identity | EdgeError): Identity {
  if (result instanceof EdgeError) throw new Error(`expected an identity, got 401 '${result.message}'`);
  return result;
}

function expectDenied(result: Identity | EdgeError, reason: string): void {
  expect(result).toBeInstanceOf(EdgeError);
  expect(result).toMatchObject({ code: 'unauthorized', status: 401, message: reason });
}

/** The header's token as the request path takes it on a cache miss: read, then its characters checked. */
function extractToken(header: string | string[] | undefined): string | undefined | EdgeError {
  const token = bearerToken(header);
  return typeof token === 'string' && !wellFormedToken(token) ? new EdgeError('unauthorized', 'malformed authorization header') : token;
}

describe('bearerToken and wellFormedToken', () => {
  it.each([
    ['absent', undefined, undefined],
    ['empty', '', undefined],
    ['blank', '   ', undefined],
    ['no headers in a list', [], undefined],
    ['Bearer', 'Bearer abc.def.ghi', 'abc.def.ghi'],
    ['lower-case scheme', 'bearer abc.def.ghi', 'abc.def.ghi'],
    ['upper-case scheme, several spaces', 'BEARER   abc.def.ghi', 'abc.def.ghi'],
    ['bare token', 'abc.def.ghi', 'abc.def.ghi'],
    ['one header in a list', ['Bearer abc.def.ghi'], 'abc.def.ghi'],
    ['padding allowed by b64token', 'Bearer abc==', 'abc=='],
  ])('%s', (_name, header, expected) => {
    expect(extractToken(header)).toBe(expected);
  });

  it.each([
    ['several headers', ['Bearer a.b.c', 'Bearer d.e.f']],
    ['nothing after Bearer', 'Bearer'],
    ['only spaces after Bearer', 'Bearer    '],
    ['whitespace inside the token', 'Bearer abc def'],
    ['tab inside a bare token', 'abc\tdef'],
    ['Basic scheme', 'Basic dXNlcjpwYXNz'],
    ['comma-joined values', 'Bearer a.b.c,d.e.f'],
    ['quoted token', 'Bearer "a.b.c"'],
  ])('refuses %s', (_name, header) => {
    const result = extractToken(header);
    expect(result).toBeInstanceOf(EdgeError);
    expect(result).toMatchObject({ code: 'unauthorized', status: 401 });
  });
});

describe('HS256 with a shared secret', () => {
  const clock = manualClock();
  const now = (): number => epochSec(clock.now());
  let verifier: TokenVerifier;
  const make = (over: Record<string, unknown> = {}) =>
    createTokenVerifier(authConfig({ secret: SECRET, algorithms: ['HS256'], issuer: 'https://idp.test', audience: 'queen', ...over }), {
      log: capturingLogger().log,
      clock: clock.now,
    });
  const claims = (extra: JWTPayload = {}): JWTPayload => ({ iss: 'https://idp.test', aud: 'queen', sub: 'user-1', exp: now() + 600, ...extra });
  const hs = (extra: JWTPayload = {}, alg = 'HS256', secret = SECRET) => signToken(claims(extra), secret, { alg });

  beforeEach(async () => {
    verifier = make();
    await verifier.start();
  });

  it('verifies a good token into an identity', async () => {
    const token = await hs({ roles: ['read-write'], tenant: 't1', custom: 7 });
    const id = expectIdentity(await verifier.verify(token));
    expect(id.token).toBe(token);
    expect(id.sub).toBe('user-1');
    expect([...id.roles]).toEqual(['read-write']);
    expect(id.tenant).toBe('t1');
    expect(id.expMs).toBe((now() + 600) * 1000);
    expect(id.claims.custom).toBe(7);
  });

  it('gives null sub, tenant and empty roles when the claims are absent', async () => {
    const token = await signToken({ iss: 'https://idp.test', aud: 'queen', exp: now() + 60 }, SECRET, { alg: 'HS256' });
    const id = expectIdentity(await verifier.verify(token));
    expect(id.sub).toBeNull();
    expect(id.tenant).toBeNull();
    expect(id.roles.size).toBe(0);
  });

  it('refuses a tampered signature and a token signed with another secret', async () => {
    expectDenied(await verifier.verify(tamperSignature(await hs())), 'bad signature');
    expectDenied(await verifier.verify(await hs({}, 'HS256', 'another-secret')), 'bad signature');
  });

  it('refuses alg none in any spelling', async () => {
    expectDenied(await verifier.verify(algNoneToken(claims())), 'algorithm not allowed');
    expectDenied(await verifier.verify(algNoneToken(claims(), 'NONE')), 'algorithm not allowed');
    expectDenied(await verifier.verify(craftToken({ typ: 'JWT' }, claims())), 'algorithm not allowed');
  });

  it('refuses an algorithm outside cfg.algorithms, even with the right secret', async () => {
    expectDenied(await verifier.verify(await hs({}, 'HS384')), 'algorithm not allowed');
    expectDenied(await verifier.verify(await hs({}, 'HS512')), 'algorithm not allowed');
  });

  it('checks exp and nbf with the clock tolerance', async () => {
    expectDenied(await verifier.verify(await hs({ exp: now() - 31 })), 'token expired');
    expectIdentity(await verifier.verify(await hs({ exp: now() - 10 })));
    expectDenied(await verifier.verify(await hs({ nbf: now() + 120 })), 'token not yet valid');
    expectIdentity(await verifier.verify(await hs({ nbf: now() + 20 })));
  });

  it('refuses non-numeric exp', async () => {
    expectDenied(await verifier.verify(await hs({ exp: 'tomorrow' as unknown as number })), 'invalid claims');
  });

  it('checks iss and aud', async () => {
    expectDenied(await verifier.verify(await hs({ iss: 'https://evil.test' })), 'wrong issuer');
    expectDenied(await verifier.verify(await hs({ iss: undefined })), 'wrong issuer');
    expectDenied(await verifier.verify(await hs({ aud: 'someone-else' })), 'wrong audience');
    expectIdentity(await verifier.verify(await hs({ aud: ['other', 'queen'] })));
  });

  it('accepts any issuer of a configured list', async () => {
    const multi = make({ issuer: ['https://a.test', 'https://idp.test'] });
    expectIdentity(await multi.verify(await hs()));
  });

  it('refuses malformed tokens without leaking parser messages', async () => {
    const good = await hs();
    const [h, p] = good.split('.');
    expectDenied(await verifier.verify('not-a-jwt'), 'malformed token');
    expectDenied(await verifier.verify(`${h}.${p}.@@@`), 'malformed token');
    expectDenied(await verifier.verify(`%%%.${p}.sig`), 'malformed token');
    expectDenied(await verifier.verify(`${b64json({ alg: 'HS256' }).slice(0, -2)}!!.${p}.x`), 'malformed token');
    expectDenied(await verifier.verify(`${h}.${p}`), 'malformed token');
    // Correctly signed, but the payload is not JSON.
    const input = `${h}.${Buffer.from('not json').toString('base64url')}`;
    expectDenied(await verifier.verify(`${input}.${createHmac('sha256', SECRET).update(input).digest('base64url')}`), 'malformed token');
  });

  it('refuses a token over auth.maxTokenBytes (8 KiB) before parsing, even a correctly signed one', async () => {
    const huge = await hs({ padding: 'x'.repeat(8 * 1024) });
    expectDenied(await verifier.verify(huge), `token too large (${huge.length} bytes; the limit is 8192)`);
    expectDenied(await verifier.verify('a'.repeat(8 * 1024 + 1)), 'token too large (8193 bytes; the limit is 8192)');
    expect(await verifier.verify(await hs({ padding: 'x'.repeat(5 * 1024) }))).not.toBeInstanceOf(EdgeError);
  });

  it('refuses a token without exp by default, accepts it with requireExp: false', async () => {
    expectDenied(await verifier.verify(await hs({ exp: undefined })), 'token has no expiry');
    const id = expectIdentity(await make({ requireExp: false }).verify(await hs({ exp: undefined })));
    expect(id.expMs).toBeNull();
  });

  it('refuses an iat in the future beyond the clock tolerance', async () => {
    expectDenied(await verifier.verify(await hs({ iat: now() + 31 })), 'token issued in the future');
    expectIdentity(await verifier.verify(await hs({ iat: now() + 29 })));
  });

  it('maxTokenAgeSec: refuses tokens issued longer ago, and tokens without iat', async () => {
    const v = make({ maxTokenAgeSec: 3600 });
    expectIdentity(await v.verify(await hs({ iat: now() - 3000 })));
    expectDenied(await v.verify(await hs({ iat: now() - 3700 })), 'token too old');
    expectDenied(await v.verify(await hs({ iat: undefined })), 'token has no issue time');
  });

  it('maxTokenAgeSec: a cached token stops verifying once it is too old', async () => {
    const v = make({ maxTokenAgeSec: 60 });
    const token = await hs({ iat: now(), exp: now() + 600 });
    expectIdentity(await v.verify(token));
    clock.advance(95_000); // 60 s age + 30 s tolerance, and a margin
    expect(v.cached(token)).toBeUndefined();
    expectDenied(await v.verify(token), 'token too old');
  });

  describe('claim types', () => {
    it('reads only the configured roles claim: `role` never widens `roles`', async () => {
      const id = expectIdentity(await verifier.verify(await hs({ roles: ['read-only'], role: 'admin' })));
      expect([...id.roles]).toEqual(['read-only']);
    });

    it('a lone role string in a claim other than the single-role claim grants nothing', async () => {
      const id = expectIdentity(await verifier.verify(await hs({ grant: 'read-write' })));
      expect([...id.roles]).toEqual([]);
    });

    it('refuses roles that are not an array of strings', async () => {
      expectDenied(await verifier.verify(await hs({ roles: 'admin' })), 'invalid roles claim');
      expectDenied(await verifier.verify(await hs({ roles: ['admin', 1] })), 'invalid roles claim');
      expectDenied(await verifier.verify(await hs({ roles: null })), 'invalid roles claim');
    });

    it('reads a `role` string only when the roles claim is absent, and refuses one of another type', async () => {
      expect([...expectIdentity(await verifier.verify(await hs({ role: 'read-write' }))).roles]).toEqual(['read-write']);
      expect([...expectIdentity(await verifier.verify(await hs({ roles: ['read-only'], role: 'admin' }))).roles]).toEqual(['read-only']);
      expectDenied(await verifier.verify(await hs({ role: ['admin'] })), 'invalid role claim');
      expectDenied(await verifier.verify(await hs({ role: 3 })), 'invalid role claim');
      const off = make({ roleClaim: null });
      expect([...expectIdentity(await off.verify(await hs({ role: 'admin' }))).roles]).toEqual([]);
    });

    it('reads a configured roles claim name', async () => {
      const custom = make({ rolesClaim: 'perms' });
      const id = expectIdentity(await custom.verify(await hs({ perms: ['admin'], roles: 'ignored-claim' })));
      expect([...id.roles]).toEqual(['admin']);
      expectDenied(await custom.verify(await hs({ perms: 'admin' })), 'invalid roles claim');
    });

    it('accepts a string or an array when the roles claim is `role` itself', async () => {
      const custom = make({ rolesClaim: 'role' });
      expect([...expectIdentity(await custom.verify(await hs({ role: 'admin' }))).roles]).toEqual(['admin']);
      expect([...expectIdentity(await custom.verify(await hs({ role: ['admin', 'read-only'] }))).roles]).toEqual(['admin', 'read-only']);
    });

    it('refuses a tenant that is not a non-empty string', async () => {
      expectDenied(await verifier.verify(await hs({ tenant: 42 })), 'invalid tenant claim');
      expectDenied(await verifier.verify(await hs({ tenant: ['t1'] })), 'invalid tenant claim');
      expectDenied(await verifier.verify(await hs({ tenant: '' })), 'invalid tenant claim');
    });

    it('reads a configured tenant claim name', async () => {
      const custom = make({ tenantClaim: 'org' });
      expect(expectIdentity(await custom.verify(await hs({ org: 'acme', tenant: 'ignored' }))).tenant).toBe('acme');
    });

    it('refuses a sub that is not a string', async () => {
      expectDenied(await verifier.verify(await hs({ sub: 12 as unknown as string })), 'invalid sub claim');
    });
  });
});

describe('key configuration', () => {
  const log = capturingLogger().log;

  it('refuses everything when no key is configured', async () => {
    const v = createTokenVerifier(authConfig({ secret: null }), { log });
    await v.start();
    expectDenied(await v.verify(await signToken({ sub: 'a' }, SECRET, { alg: 'HS256' })), 'no verification key configured');
  });

  it('treats an empty secret as none', async () => {
    const v = createTokenVerifier(authConfig({ secret: '' }), { log });
    expectDenied(await v.verify(await signToken({ sub: 'a' }, SECRET, { alg: 'HS256' })), 'no verification key configured');
  });

  it('refuses an asymmetric token when only a secret is configured', async () => {
    const pair = await keyPair('ES256');
    const v = createTokenVerifier(authConfig({ secret: SECRET }), { log });
    expectDenied(await v.verify(await signWith(pair, { sub: 'a' })), 'no key for this algorithm');
  });
});

describe('PEM public keys', () => {
  let dir: TempDir;
  const log = capturingLogger().log;
  const exp = (): number => epochSec(Date.now()) + 600;

  beforeAll(async () => {
    dir = await tempDir();
  });
  afterAll(async () => {
    await dir.remove();
  });

  it.each(['ES256', 'ES384', 'EdDSA', 'PS256', 'RS256', 'RS512'] as const)('verifies %s against an SPKI PEM file', async (alg) => {
    const pair = await keyPair(alg);
    const v = createTokenVerifier(authConfig({ algorithms: [alg], publicKey: await dir.write(`${alg}.pem`, pair.spkiPem) }), { log });
    await v.start();
    expect(expectIdentity(await v.verify(await signWith(pair, { sub: alg, exp: exp() }))).sub).toBe(alg);
    const other = await keyPair(alg);
    expectDenied(await v.verify(await signWith(other, { sub: alg, exp: exp() })), 'bad signature');
  });

  it('verifies RS256 against an X.509 certificate', async () => {
    const pems = await selfSigned([{ name: 'commonName', value: 'idp.test' }], { keySize: 2048 });
    const key = await importPKCS8(pems.private, 'RS256');
    const v = createTokenVerifier(authConfig({ algorithms: ['RS256'], publicKey: await dir.write('idp.crt', pems.cert) }), { log });
    await v.start();
    expect(expectIdentity(await v.verify(await signToken({ sub: 'cert', exp: exp() }, key, { alg: 'RS256' }))).sub).toBe('cert');
  });

  it('loads the PEM lazily when verify runs before start', async () => {
    const pair = await keyPair('ES256');
    const v = createTokenVerifier(authConfig({ algorithms: ['ES256'], publicKey: await dir.write('lazy.pem', pair.spkiPem) }), { log });
    expectIdentity(await v.verify(await signWith(pair, { sub: 'lazy', exp: exp() })));
  });

  it('refuses an alg the PEM key cannot serve', async () => {
    const rsa = await keyPair('RS256');
    const ec = await keyPair('ES256');
    const v = createTokenVerifier(authConfig({ algorithms: ['RS256', 'ES256'], publicKey: await dir.write('rsa-only.pem', rsa.spkiPem) }), { log });
    await v.start();
    expectDenied(await v.verify(await signWith(ec, { sub: 'x', exp: exp() })), 'no key for this algorithm');
  });

  it('refuses HS256 signed with the RSA public key PEM as the secret (alg confusion)', async () => {
    const rsa = await keyPair('RS256');
    const forged = hmacWithPublicKey({ sub: 'attacker', roles: ['admin'], exp: exp() }, rsa.spkiPem);
    const pemOnly = createTokenVerifier(authConfig({ algorithms: ['HS256', 'RS256'], secret: null, publicKey: await dir.write('confused.pem', rsa.spkiPem) }), {
      log,
    });
    await pemOnly.start();
    expectDenied(await pemOnly.verify(forged), 'no key for this algorithm');
    const withSecret = createTokenVerifier(
      authConfig({ algorithms: ['HS256', 'RS256'], secret: SECRET, publicKey: await dir.write('confused2.pem', rsa.spkiPem) }),
      { log },
    );
    await withSecret.start();
    expectDenied(await withSecret.verify(forged), 'bad signature');
    expectIdentity(await withSecret.verify(await signWith(rsa, { sub: 'real', exp: exp() })));
  });

  it('fails start() on a private key, a missing file, or an unsupported key type', async () => {
    const pair = await keyPair('ES256');
    const priv = createTokenVerifier(authConfig({ publicKey: await dir.write('private.pem', pair.pkcs8Pem) }), { log });
    await expect(priv.start()).rejects.toThrow(/private key/);
    const missing = createTokenVerifier(authConfig({ publicKey: `${dir.path}/nope.pem` }), { log });
    await expect(missing.start()).rejects.toThrow();
    expectDenied(await missing.verify(await signWith(pair, { sub: 'x', exp: exp() })), 'verification key unavailable');
    const x25519 = generateKeyPairSync('x25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
    const unsupported = createTokenVerifier(authConfig({ publicKey: await dir.write('x25519.pem', x25519) }), { log });
    await expect(unsupported.start()).rejects.toThrow(/unsupported key type x25519/);
  });
});

describe('JWKS', () => {
  let server: JwksServer;
  let rsa: TestKeyPair;
  let verifier: TokenVerifier | null = null;
  const open = (clock: () => number, over: Record<string, unknown> = {}) => {
    const { log, lines } = capturingLogger();
    // Key-fetch tests: their tokens carry no exp.
    verifier = createTokenVerifier(authConfig({ algorithms: [...ALL_ALGS], jwksUrl: server.url, requireExp: false, ...over }), { log, clock });
    return { verifier, lines };
  };

  beforeEach(async () => {
    rsa = await keyPair('RS256');
    server = await startJwksServer([rsa.publicJwk]);
  });
  afterEach(async () => {
    verifier?.close();
    verifier = null;
    await server.close();
  });

  it('pre-warms at start and verifies RS256 without another fetch', async () => {
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    await v.start();
    expect(server.requests).toBe(1);
    const id = expectIdentity(await v.verify(await signWith(rsa, { sub: 'rs', exp: epochSec(clock.now()) + 60 })));
    expect(id.sub).toBe('rs');
    expect(server.requests).toBe(1);
  });

  it('verifies ES256, EdDSA and PS256 members of one set', async () => {
    const pairs = [await keyPair('ES256'), await keyPair('EdDSA'), await keyPair('PS256')];
    server.setKeys([rsa.publicJwk, ...pairs.map((p) => p.publicJwk)]);
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    await v.start();
    for (const pair of pairs) expect(expectIdentity(await v.verify(await signWith(pair, { sub: pair.alg }))).sub).toBe(pair.alg);
    expect(server.requests).toBe(1);
  });

  it('picks up a rotated key with exactly one refetch for 20 concurrent requests', async () => {
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    await v.start();
    const next = await keyPair('ES256');
    server.setKeys([next.publicJwk]);
    // The delay keeps the refetch open while all 20 requests arrive.
    server.delay(50);
    const tokens = await Promise.all(Array.from({ length: 20 }, (_, i) => signWith(next, { sub: `u${i}` })));
    const results = await Promise.all(tokens.map((t) => v.verify(t)));
    expect(results.map((r) => expectIdentity(r).sub)).toEqual(tokens.map((_, i) => `u${i}`));
    expect(server.requests).toBe(2);
  });

  it('picks up a second rotation right after the first', async () => {
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    await v.start();
    for (const alg of ['ES256', 'EdDSA'] as const) {
      const next = await keyPair(alg);
      server.setKeys([next.publicJwk]);
      expectIdentity(await v.verify(await signWith(next, { sub: alg })));
    }
    expect(server.requests).toBe(3);
  });

  it('refetches once for an unknown kid, then cools down', async () => {
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    await v.start();
    const stranger = await keyPair('RS256');
    expectDenied(await v.verify(await signWith(stranger, { sub: 'a' })), 'unknown key');
    expect(server.requests).toBe(2);
    expectDenied(await v.verify(await signWith(stranger, { sub: 'b' })), 'unknown key');
    expect(server.requests).toBe(2);
    clock.advance(30_000);
    server.setKeys([rsa.publicJwk, stranger.publicJwk]);
    expectIdentity(await v.verify(await signWith(stranger, { sub: 'c' })));
    expect(server.requests).toBe(3);
  });

  it('keeps serving the loaded keys while the endpoint fails', async () => {
    const clock = manualClock();
    const { verifier: v, lines } = open(clock.now);
    await v.start();
    server.failWith(500);
    // Past the max age, so the next verification tries a background refresh, which fails.
    clock.advance(11 * 60_000);
    expectIdentity(await v.verify(await signWith(rsa, { sub: 'stale-1' })));
    await vi.waitFor(() => expect(lines.some((l) => String(l.msg).startsWith('JWKS fetch failed') && l.staleKeys === true)).toBe(true));
    expect(server.requests).toBe(2);
    expectIdentity(await v.verify(await signWith(rsa, { sub: 'stale-2' })));
    const stranger = await keyPair('RS256');
    expectDenied(await v.verify(await signWith(stranger, { sub: 'x' })), 'unknown key');
  });

  it('starts while the endpoint is down and recovers once it is back', async () => {
    server.failWith(500);
    const clock = manualClock();
    const { verifier: v, lines } = open(clock.now);
    await expect(v.start()).resolves.toBeUndefined();
    expect(lines.some((l) => l.level === 40 && l.reason === 'HTTP 500')).toBe(true);
    const token = await signWith(rsa, { sub: 'late' });
    expectDenied(await v.verify(token), 'verification keys unavailable');
    server.failWith(null);
    // Within the failure backoff nothing is fetched.
    expectDenied(await v.verify(token), 'verification keys unavailable');
    expect(server.requests).toBe(1);
    clock.advance(5_000);
    expect(expectIdentity(await v.verify(token)).sub).toBe('late');
    expect(server.requests).toBe(2);
  });

  it('never uses a JWKS member as an HMAC secret', async () => {
    server.setKeys([rsa.publicJwk, { kty: 'oct', k: Buffer.from(SECRET).toString('base64url'), kid: 'shared' }]);
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    await v.start();
    expectDenied(await v.verify(await signToken({ sub: 'x' }, SECRET, { alg: 'HS256', kid: 'shared' })), 'no key for this algorithm');
    expectDenied(await v.verify(hmacWithPublicKey({ sub: 'x' }, rsa.spkiPem, rsa.kid)), 'no key for this algorithm');
    expect(server.requests).toBe(1);
  });

  it('fetches nothing after close()', async () => {
    const clock = manualClock();
    const { verifier: v } = open(clock.now);
    v.close();
    expectDenied(await v.verify(await signWith(rsa, { sub: 'x' })), 'verification keys unavailable');
    expect(server.requests).toBe(0);
  });
});

describe('signature gate', () => {
  const clock = manualClock();
  const now = (): number => epochSec(clock.now());
  const v = createTokenVerifier(authConfig({ secret: SECRET, algorithms: ['HS256'], issuer: 'https://idp.example' }), {
    log: capturingLogger().log,
    clock: clock.now,
  });
  const hs = (claims: JWTPayload) => signToken({ iss: 'https://idp.example', exp: now() + 60, ...claims }, SECRET, { alg: 'HS256' });
  const recording = (refusal: EdgeError | null = null) => {
    const calls: string[] = [];
    const gate = {
      admit: () => {
        calls.push('admit');
        return Promise.resolve(refusal);
      },
      settled: (ok: boolean) => calls.push(ok ? 'ok' : 'failed'),
    };
    return { calls, gate };
  };

  it('cheap refusals (size, header, alg, unverified exp, nbf, iss) never reach the gate, even with a bad signature', async () => {
    const cheap: [string, string][] = [
      ['x'.repeat(9000), 'token too large (9000 bytes; the limit is 8192)'],
      ['a.b.c', 'malformed token'],
      [craftToken({ alg: 'none' }, { sub: 'a' }), 'algorithm not allowed'],
      [tamperSignature(await hs({ exp: now() - 3600 })), 'token expired'],
      [tamperSignature(await hs({ nbf: now() + 3600 })), 'token not yet valid'],
      [tamperSignature(await hs({ iss: 'https://other.example' })), 'wrong issuer'],
    ];
    for (const [token, reason] of cheap) {
      const { calls, gate } = recording();
      expectDenied(await v.verify(token, gate), reason);
      expect(calls).toEqual([]);
    }
  });

  it('asks the gate right before the signature check, returns its refusal, and reports the outcome', async () => {
    const refused = recording(new EdgeError('rate_limited', 'slow down'));
    expect(await v.verify(await hs({ sub: 'a' }), refused.gate)).toMatchObject({ code: 'rate_limited' });
    expect(refused.calls).toEqual(['admit']);
    const bad = recording();
    expectDenied(await v.verify(tamperSignature(await hs({ sub: 'b' })), bad.gate), 'bad signature');
    expect(bad.calls).toEqual(['admit', 'failed']);
    const good = recording();
    expectIdentity(await v.verify(await hs({ sub: 'c' }), good.gate));
    expect(good.calls).toEqual(['admit', 'ok']);
  });
});

describe('verified-token cache', () => {
  const clock = manualClock();
  const now = (): number => epochSec(clock.now());
  const make = (cacheSize = 100) =>
    createTokenVerifier(authConfig({ secret: SECRET, algorithms: ['HS256'], cacheSize, requireExp: false }), { log: capturingLogger().log, clock: clock.now });
  const hs = (claims: JWTPayload) => signToken(claims, SECRET, { alg: 'HS256' });

  it('returns the same identity from cached() and from a second verify', async () => {
    const v = make();
    const token = await hs({ sub: 'a', exp: now() + 60 });
    expect(v.cached(token)).toBeUndefined();
    const first = expectIdentity(await v.verify(token));
    expect(v.cached(token)).toBe(first);
    expect(await v.verify(token)).toBe(first);
  });

  it('drops an entry once exp plus the tolerance has passed', async () => {
    const v = make();
    const token = await hs({ sub: 'a', exp: now() + 60 });
    expectIdentity(await v.verify(token));
    clock.advance((60 + 29) * 1000);
    expect(v.cached(token)).toBeDefined();
    clock.advance(2000);
    expect(v.cached(token)).toBeUndefined();
    expectDenied(await v.verify(token), 'token expired');
  });

  it('keeps a token without exp for five minutes', async () => {
    const v = make();
    const token = await hs({ sub: 'forever' });
    const first = expectIdentity(await v.verify(token));
    clock.advance(5 * 60_000 - 1);
    expect(v.cached(token)).toBe(first);
    clock.advance(1);
    expect(v.cached(token)).toBeUndefined();
    expect(expectIdentity(await v.verify(token))).not.toBe(first);
  });

  it('evicts the least recently used entry at cacheSize', async () => {
    const v = make(2);
    const [a, b, c] = await Promise.all(['a', 'b', 'c'].map((sub) => hs({ sub, exp: now() + 600 })));
    expectIdentity(await v.verify(a!));
    expectIdentity(await v.verify(b!));
    expect(v.cached(a!)).toBeDefined();
    expectIdentity(await v.verify(c!));
    expect(v.cached(b!)).toBeUndefined();
    expect(v.cached(a!)).toBeDefined();
    expect(v.cached(c!)).toBeDefined();
  });

  it('caches nothing with cacheSize 0', async () => {
    const v = make(0);
    const token = await hs({ sub: 'a', exp: now() + 60 });
    const first = expectIdentity(await v.verify(token));
    expect(v.cached(token)).toBeUndefined();
    expect(await v.verify(token)).not.toBe(first);
  });

  it('holds at most cacheBytes of tokens, evicting the least recently used, and no token that alone exceeds it', async () => {
    const v = createTokenVerifier(authConfig({ secret: SECRET, algorithms: ['HS256'], cacheBytes: 25_000, maxTokenBytes: 16_384, requireExp: false }), {
      log: capturingLogger().log,
      clock: clock.now,
    });
    const tokens = await Promise.all(['a', 'b', 'c', 'd'].map((sub) => hs({ sub, exp: now() + 600, pad: 'x'.repeat(3000) })));
    for (const t of tokens) expectIdentity(await v.verify(t));
    // Each costs about 512 + 2.2 x 4.15 KB: two fit in 25,000 bytes, the oldest two were evicted.
    expect(tokens.map((t) => v.cached(t) !== undefined)).toEqual([false, false, true, true]);
    const tooBig = await hs({ sub: 'e', exp: now() + 600, pad: 'x'.repeat(9000) });
    expectIdentity(await v.verify(tooBig));
    expect(v.cached(tooBig)).toBeUndefined();
    expect(v.cached(tokens[3]!)).toBeDefined();
  });

  it('does not cache failures', async () => {
    const v = make();
    const bad = tamperSignature(await hs({ sub: 'a', exp: now() + 60 }));
    expectDenied(await v.verify(bad), 'bad signature');
    expect(v.cached(bad)).toBeUndefined();
    expectDenied(await v.verify(bad), 'bad signature');
  });
});
