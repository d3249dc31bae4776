/**
 * Attacks on the merged whole (docs/security.md): what a client sends against what the broker
 * receives, where streamed bodies, pop-query rewriting and h2 meet.
 */
import { connect as h2connect } from 'node:http2';
import { connect as tlsConnect } from 'node:tls';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compileTables } from '../../src/tables.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, TEST_SECRET, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

const HOST = 'acme.localhost';
const ADMIN_TOKEN = 'merge-review-admin-token';

describe('forwarded form vs checked form, across merged features', () => {
  let broker: BrokerDouble;
  let other: BrokerDouble;
  let h: EdgeHarness;
  let tok: string;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    other = await startBrokerDouble();
    // A short default long poll, so parked pops without a timeout end quickly at the double.
    h = await startEdge(
      testConfig([broker.url], {
        server: { longPoll: { defaultTimeoutMs: 50, maxTimeoutMs: 1000, slackMs: 5000 }, admin: { token: ADMIN_TOKEN } },
        tenants: {
          globex: { plan: 'test', hosts: ['globex.localhost'], brokers: [other.url] },
        },
      }),
    );
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
  });

  afterAll(async () => {
    await h?.close();
    await broker?.close();
    await other?.close();
  });

  /** One h2 request whose body goes in DATA frames with no content-length header. */
  async function h2WithoutLength(path: string, body: Buffer): Promise<number> {
    const session = h2connect(h.url, { rejectUnauthorized: false });
    try {
      const stream = session.request({
        ':method': 'POST',
        ':path': path,
        ':authority': HOST,
        authorization: `Bearer ${tok}`,
        'content-type': 'application/json',
      });
      stream.end(body);
      const status = await new Promise<number>((r) => stream.once('response', (hd) => r(Number(hd[':status']))));
      stream.resume();
      await new Promise<void>((r) => stream.once('close', () => r()));
      return status;
    } finally {
      session.destroy();
    }
  }

  it('an h2 body without content-length on a streamed route reaches the broker whole (it used to be dropped)', async () => {
    const body = Buffer.from(JSON.stringify({ queue: 'q', options: { leaseTime: 30 } }));
    broker.requests.length = 0;
    expect(await h2WithoutLength('/api/v1/configure', body)).toBe(200);
    const got = forwarded(broker);
    expect(got).toHaveLength(1);
    expect(got[0]!.body.equals(body)).toBe(true);
    expect(got[0]!.headers['content-length']).toBe(String(body.length));
  });

  it('an h2 body without content-length over the plan limit is refused with 413 and never forwarded', async () => {
    broker.requests.length = 0;
    expect(await h2WithoutLength('/api/v1/configure', Buffer.alloc(1024 * 1024 + 1, 'x'))).toBe(413);
    expect(forwarded(broker)).toEqual([]);
  });

  it('a parked pop reaches the broker rebuilt, its timeout explicit (a space as %20, never +)', async () => {
    broker.requests.length = 0;
    const r = await call(h, 'GET', '/api/v1/pop/queue/q?wait=true&consumerGroup=a+b', { token: tok });
    expect(r.status).toBe(204);
    expect(forwarded(broker).map((g) => g.url)).toEqual(['/api/v1/pop/queue/q?wait=true&timeout=50&consumerGroup=a%20b']);
  });

  it('a parked pop whose timeout name is percent-encoded reaches the broker with it spelled plainly', async () => {
    broker.requests.length = 0;
    const r = await call(h, 'GET', '/api/v1/pop/queue/q?wait=true&t%69meout=20', { token: tok });
    expect(r.status).toBe(204);
    expect(forwarded(broker).map((g) => g.url)).toEqual(['/api/v1/pop/queue/q?wait=true&timeout=20']);
  });

  it('h2 with :authority of one tenant and a host header of another: the :authority decides, both ways', async () => {
    broker.requests.length = 0;
    other.requests.length = 0;
    const session = h2connect(h.url, { rejectUnauthorized: false });
    const get = (authority: string, host: string) =>
      new Promise<number>((resolve, reject) => {
        const stream = session.request({
          ':method': 'GET',
          ':path': '/api/v1/resources/queues',
          ':authority': authority,
          host,
          authorization: `Bearer ${tok}`,
        });
        stream.once('response', (hd) => resolve(Number(hd[':status'])));
        stream.once('error', reject);
        stream.resume();
      });
    try {
      // acme's token: refused where :authority names globex, served by acme's broker where it names acme.
      expect(await get('globex.localhost', HOST)).toBe(403);
      expect(await get(HOST, 'globex.localhost')).toBe(200);
    } finally {
      session.destroy();
    }
    expect(forwarded(other)).toEqual([]);
    expect(forwarded(broker)).toHaveLength(1);
  });

  it('the admin API takes its token from the Authorization header only: never from a query parameter or a cookie', async () => {
    const status = async (path: string, headers: Record<string, string> = {}) => {
      const res = await request(`${h.adminUrl}${path}`, { headers });
      await res.body.dump();
      return res.statusCode;
    };
    expect(await status(`/admin/v1/tenants?token=${ADMIN_TOKEN}`)).toBe(401);
    expect(await status(`/admin/v1/tenants?access_token=${ADMIN_TOKEN}`)).toBe(401);
    expect(await status('/admin/v1/tenants', { cookie: `token=${ADMIN_TOKEN}; session=${ADMIN_TOKEN}` })).toBe(401);
    expect(await status('/admin/v1/tenants', { authorization: `Bearer ${ADMIN_TOKEN}` })).toBe(200);
  });

  it("a tenant whose own auth repeats the global key is refused at start, so the shared issuer's claimless token is no key to it", () => {
    // Its "own" identity provider is the global key again, with nothing to tell tokens apart.
    const cfg = testConfig([broker.url], {
      tenants: { shadow: { plan: 'test', hosts: ['shadow.localhost'], brokers: [other.url], auth: { secret: TEST_SECRET } } },
    });
    expect(() => compileTables(cfg)).toThrow(/tenants\.shadow\.auth: trusts the same tokens as the global auth settings/);
  });

  it.each([
    [10, 30],
    [30, 10],
  ])(
    'h2 with content-length %i and %i bytes of DATA: the stream is reset (PROTOCOL_ERROR), no body of another length reaches a broker',
    async (declared, actual) => {
      broker.requests.length = 0;
      const session = h2connect(h.url, { rejectUnauthorized: false });
      session.on('error', () => undefined);
      try {
        const stream = session.request({
          ':method': 'POST',
          ':path': '/api/v1/configure',
          ':authority': HOST,
          authorization: `Bearer ${tok}`,
          'content-type': 'application/json',
          'content-length': String(declared),
        });
        stream.on('error', () => undefined);
        stream.end(Buffer.alloc(actual, 'a'));
        await new Promise<void>((r) => stream.once('close', () => r()));
        expect(stream.rstCode).toBe(1);
      } finally {
        session.destroy();
      }
      for (const r of forwarded(broker)) expect(r.body.length).toBe(Number(r.headers['content-length']));
    },
  );

  it('a push whose bytes are not valid UTF-8 (an overlong "s" in a key) is refused, not checked as U+FFFD and forwarded as bytes', async () => {
    broker.requests.length = 0;
    const body = Buffer.concat([Buffer.from('{"items":[{"queue":"q","payload":1}],"item'), Buffer.from([0xc1, 0xb3]), Buffer.from('":[]}')]);
    const res = await request(`${h.url}/api/v1/push`, {
      method: 'POST',
      headers: { host: HOST, authorization: `Bearer ${tok}`, 'content-type': 'application/json' },
      body,
      dispatcher: h.dispatcher,
    });
    expect(res.statusCode).toBe(400);
    expect(await res.body.json()).toEqual({ error: 'body is not valid UTF-8', code: 'invalid_request' });
    expect(forwarded(broker)).toEqual([]);
  });

  it('a raw # in the query is escaped: a broker reading URLs the WHATWG way keeps the timeout the edge read', async () => {
    broker.requests.length = 0;
    const socket = tlsConnect({ host: '127.0.0.1', port: Number(new URL(h.url).port), rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
    try {
      let received = '';
      const head = new Promise<string>((resolve) =>
        socket.on('data', (d: Buffer) => {
          received += d.toString('latin1');
          if (received.includes('\r\n\r\n')) resolve(received.slice(0, received.indexOf('\r\n')));
        }),
      );
      // Before the fix the double parsed no timeout after the `#` and held the poll for 30 s.
      socket.write(`GET /api/v1/pop/queue/q?wait=true&consumerGroup=#&timeout=20 HTTP/1.1\r\nhost: ${HOST}\r\nauthorization: Bearer ${tok}\r\n\r\n`);
      expect(await head).toBe('HTTP/1.1 204 No Content');
    } finally {
      socket.destroy();
    }
    expect(forwarded(broker).map((g) => g.url)).toEqual(['/api/v1/pop/queue/q?wait=true&timeout=20&consumerGroup=%23']);
  });
});
