/**
 * Where a tenant's JWKS may be fetched from, through real sockets: https only, and never a
 * loopback, private or link-local address, named in the URL (refused in the file and in admin
 * records) or resolved from its host name when connecting, unless the operator allows it; the
 * operator's own endpoint may be anywhere. And one
 * 401 text whatever a tenant's endpoint did: the answer does not tell what is there.
 */
import { createServer as createTcpServer, type AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { startJwksServer, type JwksServer } from '../helpers/jwks-server.js';
import { capturingLogger } from '../helpers/logs.js';
import { epochSec, keyPair, signWith, type TestKeyPair } from '../helpers/tokens.js';
import { waitFor } from '../helpers/wait.js';
import { SHARED_REDIS_URL, connectTest, flushPrefix, uniquePrefix } from '../helpers/redis.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

const now = () => epochSec(Date.now());
const claims = (tenant?: string, iss?: string) => ({
  sub: 'u',
  roles: ['read-write'],
  iat: now(),
  exp: now() + 600,
  ...(tenant ? { tenant } : {}),
  ...(iss ? { iss } : {}),
});

let port = 20;
/** A tenant with its own IdP; its issuer tells it apart from others naming one endpoint in other spellings. */
const tenant = (host: string, jwksUrl: string) => ({
  plan: 'test',
  hosts: [host],
  brokers: [`http://127.0.0.1:${port++}`],
  auth: { jwksUrl, issuer: `https://${host}` },
});

describe('a tenant JWKS on a non-public address or over http', () => {
  const prefix = uniquePrefix();
  let broker: BrokerDouble;
  let idp: JwksServer;
  let key: TestKeyPair;
  let strict: EdgeHarness;
  let httpAllowed: EdgeHarness;
  let redis: Awaited<ReturnType<typeof connectTest>>;
  let path: string;
  let idpPort: string;
  const logs = capturingLogger('warn');
  const STRICT = { allowHttp: false, allowPrivateAddresses: false };

  beforeAll(async () => {
    key = await keyPair('ES256');
    [broker, idp, redis] = await Promise.all([startBrokerDouble(), startJwksServer([key.publicJwk]), connectTest(SHARED_REDIS_URL)]);
    path = new URL(idp.url).pathname;
    idpPort = new URL(idp.url).port;
    [strict, httpAllowed] = await Promise.all([
      startEdge(
        testConfig([broker.url], {
          // The operator's own endpoint is on loopback over http: allowed whatever auth.jwks says.
          auth: { secret: null, jwksUrl: idp.url, jwks: STRICT },
          redis: { url: SHARED_REDIS_URL, keyPrefix: prefix, timeoutMs: 1000 },
          server: { admin: { token: ADMIN_TOKEN } },
        }),
        { log: logs.log },
      ),
      startEdge(
        testConfig([broker.url], {
          auth: { jwks: { allowHttp: true, allowPrivateAddresses: false } },
          // A name is only known to be loopback once resolved: refused when the edge connects.
          tenants: { named: tenant('named.localhost', `http://localhost:${idpPort}${path}`) },
        }),
        { log: logs.log },
      ),
    ]);
  });
  afterAll(async () => {
    await Promise.all([strict.close(), httpAllowed.close()]);
    await Promise.all([broker.close(), idp.close()]);
    await flushPrefix(redis, prefix);
    redis.disconnect();
  });

  it('in the file: refused with its path, http and non-public literals alike', () => {
    const file = (jwksUrl: string) => testConfig([broker.url], { auth: { jwks: STRICT }, tenants: { t: tenant('t.localhost', jwksUrl) } });
    expect(() => file(`http://idp.example.com${path}`)).toThrow(/tenants\.t\.auth\.jwksUrl: a tenant JWKS must be https \(auth\.jwks\.allowHttp\)/);
    for (const host of ['127.0.0.1', '[::ffff:127.0.0.1]', '10.1.2.3', '169.254.169.254', '[fd00::1]', '[64:ff9b::a01:203]']) {
      expect(() => file(`https://${host}/jwks`), host).toThrow(/tenants\.t\.auth\.jwksUrl: a tenant JWKS may not name a non-public address/);
    }
    expect(() => file('https://idp.example.com/jwks')).not.toThrow();
  });

  it('in an admin record: 400 with its path', async () => {
    const put = (jwksUrl: string) =>
      admin(strict, 'PUT', '/admin/v1/tenants/rec', { body: { plan: 'test', brokers: ['http://127.0.0.1:19'], auth: { jwksUrl } } });
    const http = await put(`http://idp.example.com${path}`);
    expect(http.status).toBe(400);
    expect(http.json.problems).toEqual(['auth.jwksUrl: a tenant JWKS must be https (auth.jwks.allowHttp)']);
    const internal = await put(`https://127.0.0.1:${idpPort}${path}`);
    expect(internal.status).toBe(400);
    expect(internal.json.problems).toEqual(['auth.jwksUrl: a tenant JWKS may not name a non-public address (auth.jwks.allowPrivateAddresses)']);
  });

  it('a name resolving to loopback is never fetched: the tokens get the one 401, the refusal is logged', async () => {
    const r = await call(httpAllowed, 'GET', '/api/v1/pop/queue/q', {
      token: await signWith(key, claims(undefined, 'https://named.localhost')),
      host: 'named.localhost',
    });
    expect(r.status).toBe(401);
    expect(r.json).toEqual({ error: 'unknown key', code: 'unauthorized' });
    await waitFor(
      () => logs.lines.some((l) => l.msg.startsWith('JWKS fetch failed') && /resolves to a non-public address/.test(String(l.reason))),
      5000,
      'the name resolved to loopback refused',
    );
    // Only the operator's own fetch reached the IdP.
    expect(idp.requests).toBe(1);
    expect((await call(strict, 'GET', '/api/v1/pop/queue/q', { token: await signWith(key, claims('acme')), host: 'acme.localhost' })).status).toBe(204);
  });
});

describe('one 401 text whatever the endpoint did', () => {
  it('an endpoint answering 404, garbage, an empty set, or nothing at all: the same refusal', async () => {
    const [broker, notFound, empty, key] = await Promise.all([startBrokerDouble(), startJwksServer(), startJwksServer([]), keyPair('ES256')]);
    notFound.failWith(404);
    const garbage = createTcpServer((socket) => socket.end('HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nnot json!'));
    const closed = createTcpServer();
    await Promise.all([garbage, closed].map((s) => new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve))));
    const closedPort = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    const edge = await startEdge(
      testConfig([broker.url], {
        tenants: {
          a: tenant('a.localhost', notFound.url),
          b: tenant('b.localhost', `http://127.0.0.1:${(garbage.address() as AddressInfo).port}/jwks`),
          c: tenant('c.localhost', empty.url),
          d: tenant('d.localhost', `http://127.0.0.1:${closedPort}/jwks`),
        },
      }),
    );
    try {
      const answers = new Set<string>();
      for (const host of ['a.localhost', 'b.localhost', 'c.localhost', 'd.localhost']) {
        const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(key, claims(undefined, `https://${host}`)), host });
        expect(r.status).toBe(401);
        answers.add(r.text);
      }
      expect([...answers]).toEqual([JSON.stringify({ error: 'unknown key', code: 'unauthorized' })]);
    } finally {
      await edge.close();
      garbage.close();
      await Promise.all([broker.close(), notFound.close(), empty.close()]);
    }
  });
});
