/** The key form and the per-instance key cache, on a hand-built store: lookups, expiry, revocation races. */
import { describe, expect, it } from 'vitest';
import { isApiKey, KEY_LENGTH, keyId, keyMatches, mintKey } from '../../src/keys/format.js';
import type { ApiKeyRecord, ApiKeyStore } from '../../src/keys/store.js';
import { ApiKeyVerifier } from '../../src/keys/verifier.js';
import { silentLogger } from '../../src/observability/log.js';
import { isEdgeError } from '../../src/errors.js';

describe('the key form', () => {
  it('is recognisable, carries its id, and matches only itself', () => {
    const { id, key, hash } = mintKey();
    expect([isApiKey(key), key.length, keyId(key)]).toEqual([true, KEY_LENGTH, id]);
    expect(key).toMatch(/^qe_[a-z2-7]{12}_[A-Za-z0-9_-]{43}$/);
    expect(keyMatches(key, hash)).toBe(true);
    expect(keyMatches(`${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`, hash)).toBe(false);
    expect(mintKey().id).not.toBe(id);
  });

  it.each([
    '',
    'qe_',
    'qe_short',
    `qe_ABCDEFGHIJKL_${'a'.repeat(43)}`,
    `qe_abcdefghijkl-${'a'.repeat(43)}`,
    `qe_abcdefghijkl_${'a'.repeat(42)}!`,
    'eyJhbGciOiJIUzI1NiJ9.e30.x',
  ])('keyId(%s) is null', (s) => expect(keyId(s)).toBeNull());
});

/** A store whose reads wait until released, and whose revocations the test sends. */
function fakeStore(records: Map<string, ApiKeyRecord>) {
  let listener: (id: string | null) => void = () => {};
  const pending: Array<() => void> = [];
  let reads = 0;
  const store: ApiKeyStore = {
    backing: 'redis',
    add: async () => true,
    revokeAll: async () => [],
    get: async (id) => {
      reads++;
      const value = records.get(id) ?? null;
      await new Promise<void>((r) => pending.push(r));
      return value;
    },
    list: async () => [],
    revoke: async () => true,
    touch: async () => {},
    onRevoked: (l) => {
      listener = l;
    },
    checkedAt: 0,
    close: async () => {},
  };
  return {
    store,
    revoke: (id: string | null) => listener(id),
    release: () => {
      for (const r of pending.splice(0)) r();
    },
    reads: () => reads,
  };
}

function record(key: ReturnType<typeof mintKey>, extra: Partial<ApiKeyRecord> = {}): ApiKeyRecord {
  return { id: key.id, tenant: 'acme', name: 'k', roles: ['read-write'], createdAt: 0, expiresAt: null, hash: key.hash, ...extra };
}

describe('the key cache', () => {
  it('one read per id however many requests wait on it; then hits are synchronous', async () => {
    const k = mintKey();
    const f = fakeStore(new Map([[k.id, record(k)]]));
    const v = new ApiKeyVerifier(f.store, { clock: Date.now, log: silentLogger() });
    expect(v.cached(k.key)).toBeUndefined();
    const waiting = Promise.all([v.verify(k.key), v.verify(k.key), v.verify(k.key)]);
    await Promise.resolve();
    f.release();
    const ids = await waiting;
    expect(ids.map((i) => (isEdgeError(i) ? i.code : i.sub))).toEqual([`key:${k.id}`, `key:${k.id}`, `key:${k.id}`]);
    expect(f.reads()).toBe(1);
    expect(v.cached(k.key)?.tenant).toBe('acme');
  });

  it('a revocation drops the cached key; a read that raced the revocation is refused and not cached', async () => {
    const k = mintKey();
    const records = new Map([[k.id, record(k)]]);
    const f = fakeStore(records);
    const v = new ApiKeyVerifier(f.store, { clock: Date.now, log: silentLogger() });
    // A read starts, the key is revoked before it returns (with the record it read before the revoke).
    const raced = v.verify(k.key);
    await Promise.resolve();
    records.delete(k.id);
    f.revoke(k.id);
    f.release();
    // The revocation arrived before the read answered: the request is refused, and nothing is left behind.
    expect(await raced).toMatchObject({ code: 'unauthorized' });
    expect(v.cached(k.key)).toBeUndefined();
    const next = v.verify(k.key);
    await Promise.resolve();
    f.release();
    expect(isEdgeError(await next) && (await next)).toMatchObject({ code: 'unauthorized' });
  });

  it('a reconnect of the revocation feed drops every cached key; an expired key is refused from the cache', async () => {
    const k = mintKey();
    let now = 1_000;
    const f = fakeStore(new Map([[k.id, record(k, { expiresAt: 2_000 })]]));
    const v = new ApiKeyVerifier(f.store, { clock: () => now, log: silentLogger() });
    const first = v.verify(k.key);
    await Promise.resolve();
    f.release();
    expect(isEdgeError(await first)).toBe(false);
    expect(v.cached(k.key)).toBeDefined();
    f.revoke(null);
    expect(v.cached(k.key)).toBeUndefined();
    // A revocation of one id reaches every copy: the key matched before is refused at once.
    const again0 = v.verify(k.key);
    await Promise.resolve();
    f.release();
    expect(isEdgeError(await again0)).toBe(false);
    f.revoke(k.id);
    expect(v.cached(k.key)).toBeUndefined();
    const again = v.verify(k.key);
    await Promise.resolve();
    f.release();
    await again;
    now = 2_000;
    expect(v.cached(k.key)).toBeUndefined();
  });

  it('a key matched before is refused once its entry is gone, even when the revocation found no entry to mark', async () => {
    const k = mintKey();
    let now = 0;
    const f = fakeStore(new Map([[k.id, record(k)]]));
    const v = new ApiKeyVerifier(f.store, { clock: () => now, log: silentLogger() });
    // A wrong secret with the key's (public) id loads the id's entry at t=0...
    const wrong = v.verify(`qe_${k.id}_${'A'.repeat(43)}`);
    await Promise.resolve();
    f.release();
    expect(await wrong).toMatchObject({ code: 'unauthorized' });
    // ...the real key matches it just before it expires, and the revocation arrives just after.
    now = 29_900;
    expect(v.cached(k.key)).toBeDefined();
    now = 30_100;
    f.revoke(k.id);
    expect(v.cached(k.key)).toBeUndefined();
  });

  it("another key's revocation does not refuse a read in flight; a reconnect answers it but keeps nothing", async () => {
    const [k, other] = [mintKey(), mintKey()];
    const f = fakeStore(new Map([[k.id, record(k)]]));
    const v = new ApiKeyVerifier(f.store, { clock: Date.now, log: silentLogger() });
    const reading = v.verify(k.key);
    await Promise.resolve();
    f.revoke(other.id);
    f.release();
    expect(isEdgeError(await reading)).toBe(false);
    expect(v.cached(k.key)).toBeDefined();
    f.revoke(null);
    const again = v.verify(k.key);
    await Promise.resolve();
    f.revoke(null);
    f.release();
    expect(isEdgeError(await again)).toBe(false);
    expect(v.cached(k.key)).toBeUndefined();
    expect(f.reads()).toBe(2);
  });

  it("a removed tenant's keys are refused at once, from the cache too, until their revocation is confirmed; a later tenant's keys are its own", async () => {
    const [old, later] = [mintKey(), mintKey()];
    let now = 1_000;
    const f = fakeStore(
      new Map([
        [old.id, record(old, { createdAt: 500 })],
        [later.id, record(later, { createdAt: 3_000 })],
      ]),
    );
    const v = new ApiKeyVerifier(f.store, { clock: () => now, log: silentLogger() });
    const first = v.verify(old.key);
    await Promise.resolve();
    f.release();
    expect(isEdgeError(await first)).toBe(false);
    v.tenantRemoved('acme', 2_000);
    expect(v.cached(old.key)).toBeUndefined();
    // The id comes back before the store confirmed the revocation: the former tenant's key stays refused, a new one is accepted.
    now = 3_500;
    const newer = v.verify(later.key);
    await Promise.resolve();
    f.release();
    expect(isEdgeError(await newer)).toBe(false);
    expect(v.cached(old.key)).toBeUndefined();
    // A later removal's confirmation is not undone by an earlier one's.
    v.tenantRemoved('acme', 4_000);
    v.forgetRemoval('acme', 2_000);
    expect(v.cached(later.key)).toBeUndefined();
    v.forgetRemoval('acme', 4_000);
    expect(v.cached(later.key)).toBeDefined();
  });
});
