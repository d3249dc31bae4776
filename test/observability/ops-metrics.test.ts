/**
 * The metrics the ops kit alerts on (ops/prometheus/queen-edge-rules.yaml), read from a real
 * edge's /metrics: each certificate's expiry with its names (following a file replaced in place),
 * and failed JWKS fetches.
 */
import { X509Certificate } from 'node:crypto';
import { AggregatorRegistry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/observability/metrics.js';
import { admin } from '../admin/admin-call.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { makeCa, makeServerCert, replaceFile, writePem, type Pem } from '../helpers/certs.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { keyPair, signWith, tempDir, type TempDir } from '../helpers/tokens.js';
import { waitForValue } from '../helpers/wait.js';

/** `name{labels} value` lines of a family, as [labels text, value]. */
async function samples(h: EdgeHarness, name: string): Promise<Map<string, number>> {
  const text = (await admin(h, 'GET', '/metrics', { token: null })).text;
  return new Map([...text.matchAll(new RegExp(`^${name}\\{(.*)\\} (\\S+)$`, 'gm'))].map((m) => [m[1]!, Number(m[2])]));
}

const notAfterSec = (pem: Pem): number => Date.parse(new X509Certificate(pem.cert).validTo) / 1000;

describe('certificate expiry gauge', () => {
  let broker: BrokerDouble;
  let dir: TempDir;
  let ca: Pem;
  let h: EdgeHarness;
  let selfSigned: EdgeHarness;
  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    dir = await tempDir();
    ca = await makeCa();
    const main = await writePem(dir.path, 'main', await makeServerCert(ca, ['edge.example.com', '127.0.0.1']));
    const sni = await writePem(dir.path, 'acme', await makeServerCert(ca, ['acme.example.com']));
    const caFile = await dir.write('ca.crt', ca.cert);
    h = await startEdge(
      testConfig([broker.url], { server: { https: { cert: main.cert, key: main.key, clientCa: caFile, sni: [{ servername: 'acme.example.com', ...sni }] } } }),
    );
    selfSigned = await startEdge(testConfig([broker.url]));
  });
  afterAll(async () => {
    await h?.close();
    await selfSigned?.close();
    await broker?.close();
    await dir?.remove();
  });

  it('has one series per certificate, with its config path, its names and its notAfter; a file replaced in place is followed', async () => {
    const first = await samples(h, 'queen_edge_certificate_expiry_timestamp_seconds');
    expect([...first.keys()].sort()).toEqual([
      'certificate="server.https",names="edge.example.com,127.0.0.1"',
      'certificate="server.https.clientCa",names="queen-edge test CA"',
      'certificate="server.https.sni[0]",names="acme.example.com"',
    ]);
    expect(first.get('certificate="server.https.clientCa",names="queen-edge test CA"')).toBe(notAfterSec(ca));

    const renewed = await makeServerCert(ca, ['renewed.example.com']);
    await replaceFile(`${dir.path}/acme.key`, renewed.key);
    await replaceFile(`${dir.path}/acme.crt`, renewed.cert);
    const value = await waitForValue(
      async () => (await samples(h, 'queen_edge_certificate_expiry_timestamp_seconds')).get('certificate="server.https.sni[0]",names="renewed.example.com"'),
      10_000,
      'the renewed SNI certificate on /metrics',
    );
    expect(value).toBe(notAfterSec(renewed));
  });

  it('covers the generated self-signed certificate', async () => {
    const series = await samples(selfSigned, 'queen_edge_certificate_expiry_timestamp_seconds');
    expect([...series.keys()]).toEqual(['certificate="server.https",names="localhost,127.0.0.1,0:0:0:0:0:0:0:1"']);
    // Generated at start, valid for a year.
    expect([...series.values()][0]! - Date.now() / 1000).toBeGreaterThan(300 * 86400);
  });

  it('with several workers, the primary reports the earliest expiry', async () => {
    const worker = (notAfterMs: number) =>
      createMetrics({
        limiterMode: () => 'memory',
        brokers: () => [],
        usage: () => new Map(),
        flush: () => ({ flushes: 0, failures: 0, lagMs: 0 }),
        certificates: () => [{ certificate: 'server.https', names: 'a.example', notAfterMs }],
      }).registry.getMetricsAsJSON();
    const text = await AggregatorRegistry.aggregate([await worker(2_000_000_000_000), await worker(1_900_000_000_000)]).metrics();
    expect(text).toContain('queen_edge_certificate_expiry_timestamp_seconds{certificate="server.https",names="a.example"} 1900000000');
  });
});

describe('JWKS fetch failure counter', () => {
  let broker: BrokerDouble;
  let jwks: JwksServer;
  let h: EdgeHarness;
  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    jwks = await startJwksServer([]);
    jwks.failWith(503);
    h = await startEdge(testConfig([broker.url], { auth: { secret: null, jwksUrl: jwks.url, algorithms: ['RS256'] } }));
  });
  afterAll(async () => {
    await h?.close();
    await broker?.close();
    await jwks?.close();
  });

  it('counts every failed fetch by JWKS URL, the pre-warm at start included', async () => {
    const rsa = await keyPair('RS256');
    const r = await call(h, 'GET', '/api/v1/pop/queue/q', {
      token: await signWith(rsa, { tenant: 'acme', roles: ['read-write'], exp: Math.floor(Date.now() / 1000) + 60 }),
    });
    expect(r.status).toBe(401);
    const failures = (await samples(h, 'queen_edge_jwks_fetch_failures_total')).get(`url="${jwks.url}"`);
    expect(failures).toBeGreaterThanOrEqual(1);
    // Every request the IdP received failed, and each was counted once.
    expect(failures).toBe(jwks.requests);
  });
});
