import { decodeJwt, decodeProtectedHeader, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTokenVerifier, type Identity } from '../../src/auth/jwt.js';
import { createMinter } from '../../src/auth/mint.js';
import type { RawConfig } from '../../src/config/schema.js';
import { EdgeError } from '../../src/errors.js';
import { silentLogger } from '../../src/observability/log.js';
import { keyPair, tempDir, type TempDir } from '../helpers/tokens.js';

type MintConfig = RawConfig['upstreamIdentity']['mint'];

const SECRET = 'broker-shared-secret-0123456789abcdef';
const T0 = Date.UTC(2030, 0, 1, 12, 0, 0);

function mintConfig(over: Partial<MintConfig> = {}): MintConfig {
  return { algorithm: 'HS256', secret: SECRET, privateKey: null, ttlSec: 300, issuer: 'queen-edge', ...over };
}

function identity(sub: string | null, roles: string[], tenant: string | null = null): Identity {
  return { token: 'client.token.x', sub, roles: new Set(roles), tenant, expMs: null, claims: {} };
}

function manualClock(start = T0): { now: () => number; set: (ms: number) => void } {
  let t = start;
  return {
    now: () => t,
    set: (ms) => {
      t = ms;
    },
  };
}

function jwtOf(header: string): string {
  expect(header.startsWith('Bearer ')).toBe(true);
  return header.slice('Bearer '.length);
}

describe('createMinter with HS256', () => {
  it('signs sub, sorted roles, tenant, iss, iat and exp', async () => {
    const clock = manualClock();
    const minter = await createMinter(mintConfig(), { clock: clock.now });
    const header = await minter.authorizationFor(identity('user-1', ['read-write', 'admin'], 'from-token'), 'acme');
    const { payload, protectedHeader } = await jwtVerify(jwtOf(header), new TextEncoder().encode(SECRET), {
      algorithms: ['HS256'],
      issuer: 'queen-edge',
      currentDate: new Date(T0),
    });
    expect(protectedHeader.alg).toBe('HS256');
    expect(payload).toEqual({ sub: 'user-1', roles: ['admin', 'read-write'], tenant: 'acme', iss: 'queen-edge', iat: T0 / 1000, exp: T0 / 1000 + 300 });
  });

  it('omits sub when the caller has none', async () => {
    const minter = await createMinter(mintConfig(), { clock: manualClock().now });
    const payload = decodeJwt(jwtOf(await minter.authorizationFor(identity(null, ['read-only']), 'acme')));
    expect('sub' in payload).toBe(false);
    expect(payload.roles).toEqual(['read-only']);
  });

  it('answers a repeat synchronously with the same header, whatever the role order', async () => {
    const minter = await createMinter(mintConfig(), { clock: manualClock().now });
    const first = minter.authorizationFor(identity('u', ['a', 'b']), 't');
    expect(first).toBeInstanceOf(Promise);
    const header = await first;
    const again = minter.authorizationFor(identity('u', ['b', 'a']), 't');
    expect(typeof again).toBe('string');
    expect(again).toBe(header);
  });

  it('mints separately per sub, roles and tenant', async () => {
    const minter = await createMinter(mintConfig(), { clock: manualClock().now });
    const base = await minter.authorizationFor(identity('u', ['read-only']), 't');
    const others = await Promise.all([
      minter.authorizationFor(identity('v', ['read-only']), 't'),
      minter.authorizationFor(identity('u', ['read-only', 'admin']), 't'),
      minter.authorizationFor(identity('u', ['read-only']), 't2'),
      minter.authorizationFor(identity(null, ['read-only']), 't'),
    ]);
    expect(new Set([base, ...others]).size).toBe(5);
  });

  it('carries only the role names the broker knows', async () => {
    const minter = await createMinter(mintConfig(), { clock: manualClock().now });
    const payload = decodeJwt(jwtOf(await minter.authorizationFor(identity('u', ['read-only', 'superuser', 'ADMIN', 'admin ']), 't')));
    expect(payload.roles).toEqual(['read-only']);
  });

  it('never outlives the client token', async () => {
    const minter = await createMinter(mintConfig({ ttlSec: 300 }), { clock: manualClock().now });
    const shortLived = { ...identity('u', ['read-only']), expMs: T0 + 60_000 };
    expect(decodeJwt(jwtOf(await minter.authorizationFor(shortLived, 't'))).exp).toBe(T0 / 1000 + 60);
    // Same sub and roles, a longer-lived client token: its own minted token, not the capped one.
    const longLived = { ...identity('u', ['read-only']), expMs: T0 + 3_600_000 };
    expect(decodeJwt(jwtOf(await minter.authorizationFor(longLived, 't'))).exp).toBe(T0 / 1000 + 300);
  });

  it('shares one signature between concurrent misses', async () => {
    const minter = await createMinter(mintConfig(), { clock: manualClock().now });
    const a = minter.authorizationFor(identity('u', ['a']), 't');
    const b = minter.authorizationFor(identity('u', ['a']), 't');
    expect(b).toBe(a);
  });

  it('re-mints 30 s before expiry', async () => {
    const clock = manualClock();
    const minter = await createMinter(mintConfig({ ttlSec: 300 }), { clock: clock.now });
    const who = identity('u', ['a']);
    const first = await minter.authorizationFor(who, 't');
    clock.set(T0 + (300 - 31) * 1000);
    expect(minter.authorizationFor(who, 't')).toBe(first);
    clock.set(T0 + (300 - 30) * 1000);
    const renewed = minter.authorizationFor(who, 't');
    expect(renewed).toBeInstanceOf(Promise);
    const second = await renewed;
    expect(second).not.toBe(first);
    expect(decodeJwt(jwtOf(second)).exp).toBe(T0 / 1000 + 270 + 300);
    expect(minter.authorizationFor(who, 't')).toBe(second);
  });

  it('re-mints 10% of a short ttl before expiry', async () => {
    const clock = manualClock();
    const minter = await createMinter(mintConfig({ ttlSec: 60 }), { clock: clock.now });
    const who = identity('u', ['a']);
    const first = await minter.authorizationFor(who, 't');
    clock.set(T0 + 53_999);
    expect(minter.authorizationFor(who, 't')).toBe(first);
    clock.set(T0 + 54_000);
    expect(minter.authorizationFor(who, 't')).toBeInstanceOf(Promise);
  });

  it('refuses to start without a secret', async () => {
    await expect(createMinter(mintConfig({ secret: null }), {})).rejects.toThrow(/needs a secret/);
    await expect(createMinter(mintConfig({ secret: '' }), {})).rejects.toThrow(/needs a secret/);
  });
});

describe('createMinter with a private key', () => {
  let dir: TempDir;
  beforeAll(async () => {
    dir = await tempDir();
  });
  afterAll(async () => {
    await dir.remove();
  });

  it.each(['RS256', 'ES256', 'EdDSA'] as const)('signs %s with a PKCS#8 file, and the edge verifier accepts it', async (alg) => {
    const pair = await keyPair(alg);
    const clock = manualClock();
    const minter = await createMinter(mintConfig({ algorithm: alg, secret: null, privateKey: await dir.write(`${alg}.key`, pair.pkcs8Pem) }), {
      clock: clock.now,
    });
    const token = jwtOf(await minter.authorizationFor(identity('svc', ['write-only']), 'acme'));
    expect(decodeProtectedHeader(token).alg).toBe(alg);
    const { payload } = await jwtVerify(token, pair.publicKey, { algorithms: [alg], currentDate: new Date(T0) });
    expect(payload).toMatchObject({ sub: 'svc', roles: ['write-only'], tenant: 'acme', iss: 'queen-edge' });

    const verifier = createTokenVerifier(
      {
        algorithms: [alg],
        secret: null,
        publicKey: await dir.write(`${alg}.pub`, pair.spkiPem),
        jwksUrl: null,
        issuer: 'queen-edge',
        audience: null,
        clockToleranceSec: 0,
        rolesClaim: 'roles',
        roleClaim: 'role',
        tenantClaim: 'tenant',
        defaultTenant: null,
        cacheSize: 10,
        cacheBytes: 1 << 20,
        tenantCacheBytes: 1 << 20,
        maxTokenBytes: 8192,
        requireExp: true,
        maxTokenAgeSec: null,
        failedAuth: { attempts: 60, windowSec: 60, signaturesPerSec: 100 },
        jwks: { maxBytes: 262144, maxKeys: 100, allowHttp: false, allowPrivateAddresses: false },
      },
      { log: silentLogger(), clock: clock.now },
    );
    const verified = await verifier.verify(token);
    expect(verified).not.toBeInstanceOf(EdgeError);
    expect(verified).toMatchObject({ sub: 'svc', tenant: 'acme' });
  });

  it('refuses to start without privateKey, or with an unreadable one', async () => {
    await expect(createMinter(mintConfig({ algorithm: 'ES256', secret: SECRET }), {})).rejects.toThrow(/needs privateKey/);
    await expect(createMinter(mintConfig({ algorithm: 'ES256', privateKey: `${dir.path}/missing.key` }), {})).rejects.toThrow();
  });
});
