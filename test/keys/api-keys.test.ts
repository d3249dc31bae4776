/**
 * Tenant API keys through real sockets: two edges on one Redis, the admin API creating, listing
 * and revoking, keys used as Queen's JS client sends a bearer token (fetch, `Authorization: Bearer`).
 */
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyId, KEY_PREFIX } from '../../src/keys/format.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';
import { admin, ADMIN_TOKEN, runCli } from '../admin/admin-call.js';

const prefix = uniquePrefix();
const logA = capturingLogger('info');
let broker: BrokerDouble;
let a: EdgeHarness;
let b: EdgeHarness;
let redis: Redis;

const PUSH = { items: [{ queue: 'q', partition: 'p', payload: { n: 1 } }] };

beforeAll(async () => {
  broker = await startBrokerDouble({ pushStatus: 200 });
  redis = await connectTest(SHARED_REDIS_URL);
  const config = testConfig([broker.url], {
    redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
    server: { admin: { token: ADMIN_TOKEN } },
    log: { level: 'info', accessLog: true },
    // The broker is shared by both tenants, so each declares it tenancy-aware.
    tenants: {
      acme: { tenancyAwareBrokers: true },
      globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [broker.url], tenancyAwareBrokers: true },
    },
  });
  [a, b] = await Promise.all([startEdge(config, { log: logA.log }), startEdge(config)]);
});

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  await broker?.close();
  await flushPrefix(redis, prefix);
  redis.disconnect();
});

/** A request as Queen's JS client makes it (client-v2/http/HttpClient.js): fetch, JSON, `Authorization: Bearer <token>`. */
async function asJsClient(h: EdgeHarness, method: string, path: string, key: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const headers: Record<string, string> = { 'Content-Type': 'application/json', Authorization: `Bearer ${key}`, host: 'acme.localhost' };
  const res = await call(h, method as 'GET', path, { headers, ...(body === undefined ? {} : { body }) });
  return { status: res.status, json: res.json };
}

async function createKey(tenant: string, roles: string[], extra: Record<string, unknown> = {}): Promise<{ id: string; key: string }> {
  const r = await admin(a, 'POST', `/admin/v1/tenants/${tenant}/keys`, { body: { name: `${roles.join('+')} key`, roles, ...extra } });
  expect(r.status).toBe(201);
  return r.json;
}

describe('tenant API keys on two instances', () => {
  it('a key created on one instance pushes and pops on both, sent the way the JS client sends a token', async () => {
    const created = await admin(a, 'POST', '/admin/v1/tenants/acme/keys', { body: { name: 'producer', roles: ['read-write'] } });
    expect(created.status).toBe(201);
    const { id, key, name, roles, createdAt, expiresAt } = created.json;
    expect([name, roles, expiresAt, typeof createdAt]).toEqual(['producer', ['read-write'], null, 'string']);
    expect(key.startsWith(KEY_PREFIX)).toBe(true);
    expect(keyId(key)).toBe(id);
    for (const h of [a, b]) {
      expect((await asJsClient(h, 'POST', '/api/v1/push', key, PUSH)).status).toBe(200);
      expect((await asJsClient(h, 'GET', '/api/v1/pop/queue/q?batch=1&wait=false', key)).status).toBeLessThan(300);
    }
  });

  it('roles hold: a read-only key gets 403 on a push and reads', async () => {
    const { key } = await createKey('acme', ['read-only']);
    const push = await asJsClient(b, 'POST', '/api/v1/push', key, PUSH);
    expect([push.status, (push.json as { code: string }).code]).toEqual([403, 'forbidden']);
    const before = forwarded(broker).length;
    const read = await asJsClient(b, 'GET', '/api/v1/status/queues', key);
    // Forwarded: whatever the broker double answers for this route, the edge let the read through.
    expect([forwarded(broker).length - before, [401, 403].includes(read.status)]).toEqual([1, false]);
  });

  it("a key is valid only on its tenant's hosts", async () => {
    const { key } = await createKey('acme', ['read-write']);
    const r = await call(b, 'POST', '/api/v1/push', { token: key, body: PUSH, host: 'globex.localhost' });
    expect([401, 403]).toContain(r.status);
  });

  it("a made-up key with a real key's prefix and id is 401, and so is a malformed one", async () => {
    const { id } = await createKey('acme', ['read-write']);
    const forged = `${KEY_PREFIX}${id}_${'A'.repeat(43)}`;
    for (const k of [forged, `${KEY_PREFIX}nothing`, `${KEY_PREFIX}${'a'.repeat(12)}_${'B'.repeat(43)}`]) {
      const r = await call(a, 'POST', '/api/v1/push', { token: k, body: PUSH });
      expect([r.status, (r.json as { code: string }).code]).toEqual([401, 'unauthorized']);
    }
  });

  it('the list never holds the secret; the log names the key by id only', async () => {
    const { id, key } = await createKey('acme', ['read-write']);
    const before = forwarded(broker).length;
    const used = await call(a, 'POST', '/api/v1/push', { token: key, body: PUSH });
    expect(used.status).toBe(200);
    const list = await admin(a, 'GET', '/admin/v1/tenants/acme/keys');
    expect(list.status).toBe(200);
    expect(list.text).not.toContain(key.slice(KEY_PREFIX.length + 13));
    const listed = (list.json.keys as Array<Record<string, unknown>>).find((k) => k.id === id);
    expect(Object.keys(listed!).sort()).toEqual(['createdAt', 'expiresAt', 'id', 'lastUsedAt', 'name', 'roles', 'source']);
    expect(typeof listed!.lastUsedAt).toBe('string');
    await waitFor(() => logA.lines.some((l) => l.msg === 'request' && l.reqId === used.headers['x-request-id']), 5000, 'the access line');
    const line = logA.lines.find((l) => l.reqId === used.headers['x-request-id'])!;
    expect(line.sub).toBe(`key:${id}`);
    const everything = JSON.stringify(logA.lines);
    expect(everything).toContain(id);
    expect(everything).not.toContain(key);
    // Nor does the broker see it (the edge's identity mode strips the client's credential).
    for (const r of forwarded(broker).slice(before)) expect(JSON.stringify(r.headers)).not.toContain(key);
  });

  it('a revoked key is refused on both instances within a second', async () => {
    const { id, key } = await createKey('acme', ['read-write']);
    // Both instances have it cached.
    for (const h of [a, b]) expect((await call(h, 'POST', '/api/v1/push', { token: key, body: PUSH })).status).toBe(200);
    const revoked = Date.now();
    expect((await admin(a, 'DELETE', `/admin/v1/tenants/acme/keys/${id}`)).status).toBe(204);
    const refusedOn = async (h: EdgeHarness) => (await call(h, 'POST', '/api/v1/push', { token: key, body: PUSH })).status === 401;
    expect(await refusedOn(a)).toBe(true);
    await waitFor(() => refusedOn(b), 5000, 'the revoked key refused on the other instance');
    // The bound the product promises is a second; on a loaded machine the wait above is what is asserted.
    expect(Date.now() - revoked).toBeLessThan(5000);
    expect((await admin(a, 'DELETE', `/admin/v1/tenants/acme/keys/${id}`)).status).toBe(404);
  });

  it('an expired key is 401; bad requests to create one are 400 naming the field', async () => {
    const soon = new Date(Date.now() + 1500).toISOString();
    const { key } = await createKey('acme', ['read-write'], { expiresAt: soon });
    expect((await call(a, 'POST', '/api/v1/push', { token: key, body: PUSH })).status).toBe(200);
    await waitFor(async () => (await call(a, 'POST', '/api/v1/push', { token: key, body: PUSH })).status === 401, 10_000, 'the key refused once expired');
    for (const body of [
      { name: 'x', roles: [] },
      { name: 'x', roles: ['root'] },
      { roles: ['admin'] },
      { name: 'x', roles: ['admin'], expiresAt: '2001-01-01T00:00:00Z' },
    ]) {
      const r = await admin(a, 'POST', '/admin/v1/tenants/acme/keys', { body });
      expect([r.status, r.json.code]).toEqual([400, 'invalid_request']);
    }
    expect((await admin(a, 'POST', '/admin/v1/tenants/nobody/keys', { body: { name: 'x', roles: ['admin'] } })).status).toBe(404);
    expect((await admin(a, 'GET', '/admin/v1/tenants/acme/keys', { token: 'wrong' })).status).toBe(401);
  });
});

describe('keys and their tenant', () => {
  it("a deleted tenant's keys are revoked with it: a tenant created later under its id does not inherit them", async () => {
    const body = { plan: 'test', hosts: ['cust.localhost'], brokers: [broker.url], tenancyAwareBrokers: true };
    expect((await admin(a, 'PUT', '/admin/v1/tenants/cust', { body })).status).toBe(200);
    const created = await admin(a, 'POST', '/admin/v1/tenants/cust/keys', { body: { name: 'old customer', roles: ['read-write'] } });
    const { key } = created.json;
    await waitFor(
      async () => (await call(b, 'POST', '/api/v1/push', { token: key, body: PUSH, host: 'cust.localhost' })).status === 200,
      5000,
      'the key served on b',
    );
    expect((await admin(a, 'DELETE', '/admin/v1/tenants/cust')).status).toBe(204);
    expect((await admin(a, 'PUT', '/admin/v1/tenants/cust', { body })).status).toBe(200);
    expect((await admin(a, 'GET', '/admin/v1/tenants/cust/keys')).json.keys).toEqual([]);
    for (const h of [a, b]) {
      await waitFor(
        async () => (await call(h, 'POST', '/api/v1/push', { token: key, body: PUSH, host: 'cust.localhost' })).status === 401,
        5000,
        "the old customer's key refused",
      );
    }
  });

  it("creates beyond a tenant's 100 keys are refused however many arrive at once; names are printable text; a key pasted as an id is not echoed", async () => {
    const body = { plan: 'test', hosts: ['many.localhost'], brokers: [broker.url], tenancyAwareBrokers: true };
    expect((await admin(a, 'PUT', '/admin/v1/tenants/many', { body })).status).toBe(200);
    const statuses = await Promise.all(
      Array.from({ length: 120 }, (_, i) =>
        admin(i % 2 ? a : b, 'POST', '/admin/v1/tenants/many/keys', { body: { name: `k${i}`, roles: ['read-only'] } }).then((r) => r.status),
      ),
    );
    expect([statuses.filter((s) => s === 201).length, statuses.filter((s) => s === 409).length]).toEqual([100, 20]);
    const bad = await admin(a, 'POST', '/admin/v1/tenants/acme/keys', { body: { name: 'evil\u001b[31mred', roles: ['read-only'] } });
    expect([bad.status, bad.json.code]).toEqual([400, 'invalid_request']);
    const { key } = await createKey('acme', ['read-only']);
    const pasted = await admin(a, 'DELETE', `/admin/v1/tenants/acme/keys/${key}`);
    expect([pasted.status, pasted.text.includes(key.slice(16, 30))]).toEqual([404, false]);
  });
});

describe('the CLI', () => {
  it('creates a key (shown once), lists it without the secret, revokes it', async () => {
    const created = await runCli(a, 'keys', 'create', 'acme', '--name', 'cli key', '--role', 'read-write', '--json');
    expect(created.code).toBe(0);
    const { id, key } = JSON.parse(created.out);
    expect((await call(b, 'POST', '/api/v1/push', { token: key, body: PUSH })).status).toBe(200);
    const listed = await runCli(a, 'keys', 'list', 'acme');
    expect([listed.code, listed.out.includes(id), listed.out.includes(key.slice(16))]).toEqual([0, true, false]);
    expect((await runCli(a, 'keys', 'revoke', 'acme', id)).code).toBe(0);
    expect((await runCli(a, 'keys', 'revoke', 'acme', id)).code).toBe(1);
  });

  it('keys new prints a key and the file entry that holds only its hash', async () => {
    const made = await runCli(a, 'keys', 'new', 'acme', '--role', 'read-only', '--json');
    const { key, entry } = JSON.parse(made.out);
    expect(entry).toEqual({ id: keyId(key), tenant: 'acme', roles: ['read-only'], sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
  });
});

describe('failed keys and the failed-authentication throttle', () => {
  let edge: EdgeHarness;
  beforeAll(async () => {
    edge = await startEdge(
      testConfig([broker.url], {
        server: { admin: { token: ADMIN_TOKEN } },
        auth: { failedAuth: { attempts: 3, windowSec: 60, signaturesPerSec: 0 } },
      }),
    );
  });
  afterAll(async () => edge?.close());

  it('wrong secrets for one key id count as failed attempts: 429 past the limit', async () => {
    const { id } = (await admin(edge, 'POST', '/admin/v1/tenants/acme/keys', { body: { name: 'k', roles: ['read-write'] } })).json;
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++)
      statuses.push((await call(edge, 'POST', '/api/v1/push', { token: `${KEY_PREFIX}${id}_${String(i).repeat(43)}`, body: PUSH })).status);
    expect(statuses).toEqual([401, 401, 401, 429, 429]);
  });
});

describe('without Redis', () => {
  let edge: EdgeHarness;
  const fileKey = 'qe_abcdefghijkl_0123456789012345678901234567890123456789012';
  beforeAll(async () => {
    const sha256 = (await import('node:crypto')).createHash('sha256').update(fileKey).digest('hex');
    edge = await startEdge(
      testConfig([broker.url], {
        server: { admin: { token: ADMIN_TOKEN } },
        apiKeys: [{ id: 'abcdefghijkl', tenant: 'acme', name: 'from the file', roles: ['read-write'], sha256 }],
      }),
    );
  });
  afterAll(async () => edge?.close());

  it("a key declared in the file by its hash works, is listed as the file's, and is not revoked through the API", async () => {
    expect((await call(edge, 'POST', '/api/v1/push', { token: fileKey, body: PUSH })).status).toBe(200);
    const list = await admin(edge, 'GET', '/admin/v1/tenants/acme/keys');
    expect(list.json.keys).toEqual([expect.objectContaining({ id: 'abcdefghijkl', source: 'file', createdAt: null })]);
    const revoke = await admin(edge, 'DELETE', '/admin/v1/tenants/acme/keys/abcdefghijkl');
    expect([revoke.status, revoke.json.code]).toEqual([409, 'conflict']);
  });

  it('keys created through the admin API work on this instance and revoke at once', async () => {
    const { id, key } = (await admin(edge, 'POST', '/admin/v1/tenants/acme/keys', { body: { name: 'k', roles: ['read-write'] } })).json;
    expect((await call(edge, 'POST', '/api/v1/push', { token: key, body: PUSH })).status).toBe(200);
    expect((await admin(edge, 'DELETE', `/admin/v1/tenants/acme/keys/${id}`)).status).toBe(204);
    expect((await call(edge, 'POST', '/api/v1/push', { token: key, body: PUSH })).status).toBe(401);
  });
});
