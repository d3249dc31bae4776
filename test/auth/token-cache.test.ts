/**
 * The verified-token cache through real sockets: a tenant holding its own signing key floods the
 * edge with large valid tokens; another tenant's cached token stays a cache hit (its tenant's
 * signature-check count does not move), the flooder's share stays within its byte bound, and a
 * token over auth.maxTokenBytes is refused before any signature check.
 */
import { connect as h2connect } from 'node:http2';
import { createHmac } from 'node:crypto';
import { Agent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { b64json, epochSec, signToken } from '../helpers/tokens.js';

const SECRET_A = 'tenant-a-own-secret-0123456789abcdef';
const SECRET_B = 'tenant-b-own-secret-0123456789abcdef';
const SHARE_BYTES = 256 * 1024;

/** One broker double per tenant: tenants may not share a broker that does not scope data by tenant. */
let brokers: BrokerDouble[];
let edge: EdgeHarness;

beforeAll(async () => {
  brokers = await Promise.all([startBrokerDouble(), startBrokerDouble(), startBrokerDouble()]);
  const [acme, a, b] = brokers.map((d) => [d.url]);
  edge = await startEdge(
    testConfig(acme!, {
      // 50 entries: before shares, the flood's first 50 tokens already evicted every other token.
      auth: { cacheSize: 50, tenantCacheBytes: SHARE_BYTES },
      tenants: {
        ta: { plan: 'test', hosts: ['a.localhost'], brokers: a, auth: { secret: SECRET_A } },
        tb: { plan: 'test', hosts: ['b.localhost'], brokers: b, auth: { secret: SECRET_B } },
      },
    }),
  );
});

afterAll(async () => {
  await edge.close();
  await Promise.all(brokers.map((d) => d.close()));
});

async function metric(name: string, tenant: string): Promise<number> {
  const m = await edge.app.metrics.getSingleMetric(name)!.get();
  return m.values.find((v) => v.labels.tenant === tenant)?.value ?? 0;
}

const fresh = () => ({ sub: 'u', roles: ['read-write'], iat: epochSec(Date.now()), exp: epochSec(Date.now()) + 600 });

/** An HS256 token signed with node:crypto (jose's async signing would dominate the flood's time). */
function hs256(claims: Record<string, unknown>, secret: string): string {
  const input = `${b64json({ alg: 'HS256', typ: 'JWT' })}.${b64json(claims)}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
}

describe('token cache shares', () => {
  it("a tenant's flood of large valid tokens evicts no other tenant's cached token and stays in its byte share", async () => {
    const bToken = await signToken(fresh(), SECRET_B, { alg: 'HS256' });
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: bToken, host: 'b.localhost' })).status).toBe(204);
    const bChecks = await metric('queen_edge_token_verifications_total', 'tb');
    expect(bChecks).toBe(1);

    // 400 distinct 6.8 KB tokens (2.7 MB of claims, 10x the share) over 8 connections.
    const flood = new Agent({ connect: { rejectUnauthorized: false }, connections: 8 });
    const base = { ...fresh(), pad: 'x'.repeat(5000) };
    const statuses = new Map<number, number>();
    try {
      const send = async (i: number): Promise<void> => {
        const res = await request(`${edge.url}/api/v1/pop/queue/q`, {
          headers: { host: 'a.localhost', authorization: `Bearer ${hs256({ ...base, sub: `flood-${i}` }, SECRET_A)}` },
          dispatcher: flood,
        });
        await res.body.dump();
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      };
      for (let i = 0; i < 400; i += 8) await Promise.all(Array.from({ length: 8 }, (_, j) => send(i + j)));
    } finally {
      await flood.destroy();
    }
    expect(Object.fromEntries(statuses)).toEqual({ 204: 400 });
    expect(await metric('queen_edge_token_verifications_total', 'ta')).toBe(400);
    expect(await metric('queen_edge_token_cache_bytes', 'ta')).toBeLessThanOrEqual(SHARE_BYTES);

    // The other tenant's token is still a hit: answered without a new signature check.
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: bToken, host: 'b.localhost' })).status).toBe(204);
    expect(await metric('queen_edge_token_verifications_total', 'tb')).toBe(bChecks);
  });

  it('a burst of requests carrying one new token costs one signature check (they were each checked, and past the per-address gate refused 429)', async () => {
    const before = await metric('queen_edge_token_verifications_total', 'ta');
    const burst = hs256({ ...fresh(), sub: 'burst' }, SECRET_A);
    // One h2 session, 40 streams opened at once: their heads arrive together, before any check ends.
    const session = h2connect(edge.url, { rejectUnauthorized: false });
    try {
      const statuses = await Promise.all(
        Array.from({ length: 40 }, () => {
          const stream = session.request({ ':path': '/api/v1/pop/queue/q', ':authority': 'a.localhost', authorization: `Bearer ${burst}` });
          stream.resume();
          return new Promise<number>((r) => stream.once('response', (h) => r(Number(h[':status']))));
        }),
      );
      expect(new Set(statuses)).toEqual(new Set([204]));
    } finally {
      session.destroy();
    }
    expect(await metric('queen_edge_token_verifications_total', 'ta')).toBe(before + 1);
  });

  it('a correctly signed token over auth.maxTokenBytes (8 KiB) is refused before any signature check', async () => {
    const before = await metric('queen_edge_token_verifications_total', 'ta');
    const big = hs256({ ...fresh(), pad: 'x'.repeat(7000) }, SECRET_A);
    expect(big.length).toBeGreaterThan(8192);
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: big, host: 'a.localhost' });
    expect(r.status).toBe(401);
    expect(r.json).toMatchObject({ code: 'unauthorized', error: `token too large (${big.length} bytes; the limit is 8192)` });
    expect(await metric('queen_edge_token_verifications_total', 'ta')).toBe(before);
  });
});
