/**
 * A tenant's JWKS bounded, through real sockets: a huge document is refused after maxBytes (the
 * rest is never read or parsed), a set of more than maxKeys members is refused whole (the keys
 * loaded before keep verifying), a token's key lookup costs the same against 10,000 members as
 * against 2, and an IdP that publishes a new kid before every token gets its set fetched a few
 * times, not once per token.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { capturingLogger } from '../helpers/logs.js';
import { craftToken, epochSec, keyPair, signWith, type TestKeyPair } from '../helpers/tokens.js';
import { waitFor } from '../helpers/wait.js';

/** An IdP whose answer a test decides per request; counts requests and the bytes it wrote. */
interface Idp {
  url: string;
  requests: number;
  bytesSent: number;
  handle: (req: IncomingMessage, res: ServerResponse, n: number) => void;
  close(): Promise<void>;
}

async function startIdp(): Promise<Idp> {
  const idp: Idp = {
    url: '',
    requests: 0,
    bytesSent: 0,
    handle: (_req, res) => res.end('{"keys":[]}'),
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server: Server = createServer((req, res) => {
    idp.requests++;
    res.on('close', () => {
      idp.bytesSent += req.socket.bytesWritten;
    });
    idp.handle(req, res, idp.requests);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  idp.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`;
  return idp;
}

/** `n` members: one public EC key under `n` kids (`<prefix><i>`), as JSON. */
function members(jwk: object, n: number, prefix = 'k'): string[] {
  return Array.from({ length: n }, (_, i) => JSON.stringify({ ...jwk, kid: `${prefix}${i}` }));
}

const now = () => epochSec(Date.now());
const claims = () => ({ sub: 'u', roles: ['read-write'], iat: now(), exp: now() + 600 });
const MiB = 1024 * 1024;

describe('a huge or overfull set', () => {
  let broker: BrokerDouble;
  let manyBroker: BrokerDouble;
  let hugeIdp: Idp;
  let manyIdp: Idp;
  let edge: EdgeHarness;
  let key: TestKeyPair;
  const logs = capturingLogger('warn');

  beforeAll(async () => {
    [broker, manyBroker, hugeIdp, manyIdp, key] = await Promise.all([startBrokerDouble(), startBrokerDouble(), startIdp(), startIdp(), keyPair('ES256')]);
    edge = await startEdge(
      testConfig([broker.url], {
        tenants: {
          huge: { plan: 'test', hosts: ['huge.localhost'], brokers: ['http://127.0.0.1:9'], auth: { jwksUrl: hugeIdp.url } },
          many: { plan: 'test', hosts: ['many.localhost'], brokers: [manyBroker.url], auth: { jwksUrl: manyIdp.url } },
        },
      }),
      { log: logs.log },
    );
  });
  afterAll(async () => {
    await edge.close();
    await Promise.all([broker.close(), manyBroker.close(), hugeIdp.close(), manyIdp.close()]);
  });

  it('a 30 MB document streamed without a length is given up after maxBytes; the edge neither reads nor keeps the rest', async () => {
    const chunk = `${members(key.publicJwk, 1000).join(',')},`;
    const total = 30 * MiB;
    hugeIdp.handle = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"keys":[');
      let sent = 0;
      const pump = (): void => {
        while (sent < total) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end(`${JSON.stringify(key.publicJwk)}]}`);
      };
      res.on('close', () => {
        sent = total;
      });
      pump();
    };
    const rssBefore = process.memoryUsage().rss;
    const r = await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(key, claims()), host: 'huge.localhost' });
    expect(r.status).toBe(401);
    expect(r.json).toMatchObject({ code: 'unauthorized', error: 'unknown key' });
    await waitFor(() => logs.lines.some((l) => l.msg.startsWith('JWKS fetch failed') && String(l.reason).includes('larger than auth.jwks.maxBytes')), 5000);
    await waitFor(() => hugeIdp.bytesSent > 0, 5000, 'the IdP connection closed');
    // What was written before the edge hung up: maxBytes (256 KiB) plus the sockets' buffers, far from 30 MB.
    expect(hugeIdp.bytesSent).toBeLessThan(8 * MiB);
    const grown = (process.memoryUsage().rss - rssBefore) / MiB;
    expect(grown).toBeLessThan(64);
  });

  it('a set of more than maxKeys members is refused whole; the keys loaded before keep verifying', async () => {
    manyIdp.handle = (_req, res) => res.end(JSON.stringify({ keys: [key.publicJwk] }));
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(key, claims()), host: 'many.localhost' })).status).toBe(204);
    manyIdp.handle = (_req, res) => res.end(`{"keys":[${[JSON.stringify(key.publicJwk), ...members(key.publicJwk, 100, 'extra')].join(',')}]}`);
    const before = manyIdp.requests;
    // An unknown kid makes the edge fetch the set again: 101 members, refused.
    const probe = craftToken({ alg: 'ES256', kid: 'extra7' }, claims(), 'c2ln');
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: probe, host: 'many.localhost' })).json).toMatchObject({ error: 'unknown key' });
    expect(manyIdp.requests).toBe(before + 1);
    expect(logs.lines.some((l) => String(l.reason).startsWith('101 keys, more than auth.jwks.maxKeys (100)'))).toBe(true);
    expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: await signWith(key, claims()), host: 'many.localhost' })).status).toBe(204);
  });
});

describe('cost per token, and fetches per set', () => {
  let broker: BrokerDouble;
  let smallIdp: Idp;
  let largeIdp: Idp;
  let rotatingIdp: Idp;
  let edge: EdgeHarness;
  let key: TestKeyPair;

  beforeAll(async () => {
    [broker, smallIdp, largeIdp, rotatingIdp, key] = await Promise.all([startBrokerDouble(), startIdp(), startIdp(), startIdp(), keyPair('ES256')]);
    smallIdp.handle = (_req, res) => res.end(`{"keys":[${members(key.publicJwk, 2).join(',')}]}`);
    const large = `{"keys":[${members(key.publicJwk, 10_000).join(',')}]}`;
    largeIdp.handle = (_req, res) => res.end(large);
    edge = await startEdge(
      testConfig([broker.url], {
        auth: { jwks: { maxBytes: 8 * MiB, maxKeys: 10_000 } },
        tenants: {
          small: { plan: 'test', hosts: ['small.localhost'], brokers: ['http://127.0.0.1:9'], auth: { jwksUrl: smallIdp.url } },
          large: { plan: 'test', hosts: ['large.localhost'], brokers: ['http://127.0.0.1:10'], auth: { jwksUrl: largeIdp.url } },
          rotating: { plan: 'test', hosts: ['rotating.localhost'], brokers: ['http://127.0.0.1:11'], auth: { jwksUrl: rotatingIdp.url } },
        },
      }),
    );
  });
  afterAll(async () => {
    await edge.close();
    await Promise.all([broker.close(), smallIdp.close(), largeIdp.close(), rotatingIdp.close()]);
  });

  /** CPU (user + system, this process: client and edge) per junk token sent to `host`. */
  async function cpuPerToken(host: string, tokens: readonly string[]): Promise<number> {
    const start = process.cpuUsage();
    for (const t of tokens) expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, host })).status).toBe(401);
    const used = process.cpuUsage(start);
    return (used.user + used.system) / tokens.length / 1000;
  }

  it('junk tokens cost the same against a set of 10,000 keys as against 2', async () => {
    // Loaded first: what is measured below is the tokens, not the fetch.
    for (const host of ['small.localhost', 'large.localhost']) {
      await call(edge, 'GET', '/api/v1/pop/queue/q', { token: craftToken({ alg: 'ES256', kid: 'k0' }, claims(), 'c2ln'), host });
    }
    await waitFor(() => smallIdp.requests === 1 && largeIdp.requests === 1, 5000, 'both sets fetched once');
    // Without a kid every member suits (ambiguous); with a kid one does (a bad signature). Neither scans the set.
    const junk = Array.from({ length: 200 }, (_, i) => craftToken({ alg: 'ES256', ...(i % 2 ? { kid: 'k1' } : {}) }, claims(), 'c2ln'));
    await cpuPerToken('small.localhost', junk.slice(0, 20));
    const small = await cpuPerToken('small.localhost', junk);
    const large = await cpuPerToken('large.localhost', junk);
    expect(large).toBeLessThan(small * 2 + 0.5);
    expect(largeIdp.requests).toBe(1);
  });

  it('an IdP that publishes a new kid before every token gets its set fetched a few times, not per token', async () => {
    // Each fetch serves kids r0..r<n>: the next token's kid is always new to the edge, and found once fetched.
    rotatingIdp.handle = (_req, res, n) => res.end(`{"keys":[${members(key.publicJwk, n + 1, 'r').join(',')}]}`);
    await waitFor(() => rotatingIdp.requests >= 1, 5000, 'the set fetched at start');
    for (let i = 1; i <= 20; i++) {
      const token = craftToken({ alg: 'ES256', kid: `r${i}` }, claims(), 'c2ln');
      expect((await call(edge, 'GET', '/api/v1/pop/queue/q', { token, host: 'rotating.localhost' })).status).toBe(401);
    }
    expect(rotatingIdp.requests).toBeLessThanOrEqual(4);
  });
});
