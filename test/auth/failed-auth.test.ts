/**
 * The per-client signature-check gate through real sockets. Garbage from one address locks out
 * the identity it names, not a client behind the same address (a NAT) with a valid token; cheap
 * garbage (malformed, expired, wrong alg) costs no signature check and spends no budget; and the
 * address limited by is the peer unless the peer is a trusted proxy.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness, type Reply } from '../helpers/edge.js';
import { craftToken, epochSec, tamperSignature } from '../helpers/tokens.js';

let broker: BrokerDouble;
/** Behind a trusted proxy (the test client's 127.0.0.1): each test is its own client by X-Forwarded-For. */
let proxied: EdgeHarness;
/** Reached directly: trustedProxies names no address of the test client. */
let direct: EdgeHarness;

const failedAuth = { attempts: 5, windowSec: 60, signaturesPerSec: 20 };

beforeAll(async () => {
  broker = await startBrokerDouble();
  [proxied, direct] = await Promise.all([
    startEdge(testConfig([broker.url], { server: { trustedProxies: ['127.0.0.1/32'] }, auth: { failedAuth } })),
    startEdge(testConfig([broker.url], { server: { trustedProxies: ['10.0.0.0/8'] }, auth: { failedAuth } })),
  ]);
});

afterAll(async () => {
  await Promise.all([proxied.close(), direct.close()]);
  await broker.close();
});

const claims = (sub: string) => ({ sub, roles: ['read-write'], tenant: 'acme', jti: randomUUID() });
/** A token for `sub` whose signature does not verify: it costs a signature check. */
const garbage = async (sub: string) => tamperSignature(await token(claims(sub)));
const pop = (edge: EdgeHarness, t: string, xff?: string): Promise<Reply> =>
  call(edge, 'GET', '/api/v1/pop/queue/q', { token: t, ...(xff === undefined ? {} : { headers: { 'x-forwarded-for': xff } }) });

describe('garbage and a valid client behind one address', () => {
  it('a flood of bad signatures locks out the identity it names; a client with a valid token from the same address passes', async () => {
    const nat = '198.51.100.10';
    expect((await pop(proxied, await token(claims('alice')), nat)).status).toBe(204);

    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push((await pop(proxied, await garbage('mallory'), nat)).status);
    for (let i = 0; i < 60; i++) statuses.push((await pop(proxied, await garbage(`random-${randomUUID()}`), nat)).status);
    // Old rule: the address was locked after 5 failures, for everyone behind it.
    expect(statuses.slice(0, 5)).toEqual([401, 401, 401, 401, 401]);
    expect(statuses.slice(5, 30).every((s) => s === 429)).toBe(true);
    const mallory = await pop(proxied, await garbage('mallory'), nat);
    expect(mallory.status).toBe(429);
    expect(mallory.json).toMatchObject({ code: 'rate_limited', error: 'too many failed authentications for this identity from this address' });

    // Alice verified from here before: her new token passes even while the address is over its checks per second.
    const before = forwarded(broker).length;
    expect((await pop(proxied, await token(claims('alice')), nat)).status).toBe(204);
    expect(forwarded(broker).length).toBe(before + 1);

    // A new client behind the NAT waits at most the Retry-After the budget gives (1 s), never the lockout.
    let r = await pop(proxied, await token(claims('bob')), nat);
    for (let tries = 0; r.status === 429 && tries < 5; tries++) {
      expect(Number(r.headers['retry-after'])).toBeLessThanOrEqual(1);
      // Time is the subject: the client waits the Retry-After it was given, as a well-behaved one does.
      await new Promise((done) => setTimeout(done, Number(r.headers['retry-after']) * 1000));
      r = await pop(proxied, await token(claims('bob')), nat);
    }
    expect(r.status).toBe(204);
  });

  it('cheap garbage (malformed, expired, wrong alg) costs no signature check and spends no budget', async () => {
    const client = '198.51.100.20';
    const now = epochSec(Date.now());
    const cheap = [
      'a.b.c',
      craftToken({ alg: 'HS256' }, { ...claims('x'), exp: now - 3600 }, 'sig'),
      craftToken({ alg: 'none' }, claims('x'), ''),
      craftToken({ alg: 'RS256' }, claims('x'), 'sig'),
    ];
    for (let i = 0; i < 100; i++) {
      const r = await pop(proxied, cheap[i % cheap.length]!, client);
      expect(r.status).toBe(401);
    }
    // 100 refusals, five times the budget of 20 checks per second: a new valid token passes at once.
    expect((await pop(proxied, await token(claims('carol')), client)).status).toBe(204);
  });
});

describe('trusted proxies', () => {
  it('behind a trusted proxy the client is the right-most untrusted X-Forwarded-For entry; what it writes to the left is not read', async () => {
    for (let i = 0; i < 5; i++) expect((await pop(proxied, await garbage('eve'), '198.51.100.30')).status).toBe(401);
    expect((await pop(proxied, await garbage('eve'), '198.51.100.30')).status).toBe(429);
    expect((await pop(proxied, await garbage('eve'), '203.0.113.99, 198.51.100.30')).status).toBe(429);
    expect((await pop(proxied, await garbage('eve'), '198.51.100.31')).status).toBe(401);
    const before = forwarded(broker).length;
    expect((await pop(proxied, await token(claims('dave')), '203.0.113.99, 198.51.100.32')).status).toBe(204);
    expect(forwarded(broker)[before]!.headers['x-forwarded-for']).toBe('203.0.113.99, 198.51.100.32, 127.0.0.1');
  });

  it('IPv4 clients seen through NAT64 (64:ff9b::/96) have a budget each, as their IPv4 address; IPv6 clients share their /64', async () => {
    // One identity's failures lock it out from one client; the NAT64 neighbour of that client is another client.
    for (let i = 0; i < 5; i++) expect((await pop(proxied, await garbage('oscar'), '64:ff9b::198.51.100.40')).status).toBe(401);
    expect((await pop(proxied, await garbage('oscar'), '64:ff9b::c633:6428')).status).toBe(429);
    expect((await pop(proxied, await garbage('oscar'), '198.51.100.40')).status).toBe(429);
    expect((await pop(proxied, await garbage('oscar'), '64:ff9b::198.51.100.41')).status).toBe(401);
    // Two addresses in one native /64 are one client.
    for (let i = 0; i < 5; i++) expect((await pop(proxied, await garbage('peggy'), `2001:db8:40:1::${i + 1}`)).status).toBe(401);
    expect((await pop(proxied, await garbage('peggy'), '2001:db8:40:1::ffff')).status).toBe(429);
  });

  it('reached directly, a client cannot choose its address by X-Forwarded-For', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) statuses.push((await pop(direct, await garbage('trudy'), `198.51.100.${100 + i}`)).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429, 429, 429]);
    const before = forwarded(broker).length;
    expect((await pop(direct, await token(claims('dave')), '198.51.100.1')).status).toBe(204);
    expect(forwarded(broker)[before]!.headers['x-forwarded-for']).toBe('127.0.0.1');
  });
});
