/**
 * Attacks on the merged whole (docs/security.md): what a client sends against what the broker
 * receives, where streamed bodies, pop-query rewriting and h2 meet.
 */
import { connect as h2connect } from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

const HOST = 'acme.localhost';

describe('forwarded form vs checked form, across merged features', () => {
  let broker: BrokerDouble;
  let h: EdgeHarness;
  let tok: string;

  beforeAll(async () => {
    broker = await startBrokerDouble();
    // A short default long poll, so parked pops without a timeout end quickly at the double.
    h = await startEdge(testConfig([broker.url], { server: { longPoll: { defaultTimeoutMs: 50, maxTimeoutMs: 1000, slackMs: 5000 } } }));
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
  });

  afterAll(async () => {
    await h?.close();
    await broker?.close();
  });

  /** One h2 request whose body goes in DATA frames with no content-length header. */
  async function h2WithoutLength(path: string, body: Buffer): Promise<number> {
    const session = h2connect(h.url, { rejectUnauthorized: false });
    try {
      const stream = session.request({ ':method': 'POST', ':path': path, ':authority': HOST, authorization: `Bearer ${tok}`, 'content-type': 'application/json' });
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

  it('a parked pop keeps every query pair but timeout byte for byte (a space stays %20, never +)', async () => {
    broker.requests.length = 0;
    const r = await call(h, 'GET', '/api/v1/pop/queue/q?wait=true&consumerGroup=a%20b', { token: tok });
    expect(r.status).toBe(204);
    expect(forwarded(broker).map((g) => g.url)).toEqual(['/api/v1/pop/queue/q?wait=true&consumerGroup=a%20b&timeout=50']);
  });

  it('a parked pop whose timeout name is percent-encoded reaches the broker with it spelled plainly', async () => {
    broker.requests.length = 0;
    const r = await call(h, 'GET', '/api/v1/pop/queue/q?wait=true&t%69meout=20', { token: tok });
    expect(r.status).toBe(204);
    expect(forwarded(broker).map((g) => g.url)).toEqual(['/api/v1/pop/queue/q?wait=true&timeout=20']);
  });
});
