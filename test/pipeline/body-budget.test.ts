/**
 * Bodies in flight (docs/limits.md, "Bodies in flight"), through real h2 streams: a tenant's heads
 * in flight are capped at its request burst, buffered bodies claim their declared length from the
 * tenant's budget and take their bytes from the process's as they arrive, a full process budget is
 * shared fairly, and a body that does not arrive within the body deadline is refused with 408.
 * Each push here announces its body and holds it back (all of it, or all but what it sends).
 */
import type http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { SHORT_DEADLINES, call, h2Session, h2Settled, startEdge, testConfig, token, TEST_PLAN, type EdgeHarness } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';

const KiB = 1024;
const DEADLINE_MS = 1500;

let broker: BrokerDouble;
let edge: EdgeHarness;
let session: http2.ClientHttp2Session;
const tokens: Record<string, string> = {};

beforeAll(async () => {
  broker = await startBrokerDouble();
  // One broker double for every tenant, declared tenancy-aware (shared with the file's acme).
  const tenant = (plan: string) => ({ plan, hosts: [`${plan}.localhost`], brokers: [broker.url], tenancyAwareBrokers: true });
  edge = await startEdge(
    testConfig([broker.url], {
      // A stream refused from its head waits for its body to drop it (up to 64 KiB), so one held back
      // ends at the request deadline: short here, after the body deadline the admitted ones meet.
      server: {
        ...SHORT_DEADLINES,
        requestTimeoutMs: 3 * DEADLINE_MS,
        bodyBudget: { perTenantBytes: 64 * KiB, perProcessBytes: 96 * KiB, deadlineMs: DEADLINE_MS },
      },
      plans: {
        test: TEST_PLAN,
        narrow: { ...TEST_PLAN, limits: { ...TEST_PLAN.limits, requestBurst: 3 } },
        wide: TEST_PLAN,
        other: TEST_PLAN,
      },
      tenants: { acme: { tenancyAwareBrokers: true }, narrow: tenant('narrow'), wide: tenant('wide'), other: tenant('other') },
    }),
  );
  for (const t of ['narrow', 'wide', 'other']) {
    tokens[t] = await token({ roles: ['read-write'], tenant: t });
    // Verified once, so every later head is decided synchronously, in the order its stream came.
    expect((await call(edge, 'GET', '/api/v1/resources/queues', { token: tokens[t], host: `${t}.localhost` })).status).toBe(200);
  }
  session = await h2Session(edge.url);
});
afterAll(async () => {
  session?.destroy();
  await edge?.close();
  await broker?.close();
});

/** A push of `length` bytes announced, of which `send` are sent (none by default) and the rest held back; resolves with its status and code once answered. */
function heldPush(
  tenant: string,
  length: number,
  opts: { session?: http2.ClientHttp2Session; send?: number } = {},
): Promise<{ status: number; code: string | null }> {
  const stream = (opts.session ?? session).request(
    {
      ':method': 'POST',
      ':path': '/api/v1/push',
      ':authority': `${tenant}.localhost`,
      authorization: `Bearer ${tokens[tenant]}`,
      'content-type': 'application/json',
      'content-length': String(length),
    },
    { endStream: false },
  );
  stream.on('error', () => {});
  if (opts.send) stream.write(Buffer.alloc(opts.send, 0x20));
  return new Promise((resolve) => {
    let status = 0;
    let text = '';
    stream.once('response', (h) => {
      status = Number(h[':status']);
    });
    stream.on('data', (d: Buffer) => {
      text += d.toString();
    });
    stream.once('close', () => resolve({ status, code: text === '' ? null : ((JSON.parse(text) as { code: string }).code ?? null) }));
  });
}

describe('bodies in flight', () => {
  it('a tenant has no more heads in flight than its burst; the bodies let in that never come get 408 at the deadline', async () => {
    const answers = await Promise.all(Array.from({ length: 5 }, () => heldPush('narrow', 100)));
    const refused = answers.filter((a) => a.status === 429);
    expect(refused).toEqual(Array(2).fill({ status: 429, code: 'rate_limited' }));
    expect(answers.filter((a) => a.status !== 429)).toEqual(Array(3).fill({ status: 408, code: 'request_timeout' }));
  });

  it("a declared length over what is left of its tenant's budget gets 429 from its head; lengths only announced hold none of the process's budget", async () => {
    const held = heldPush('wide', 60 * KiB);
    // The tenant claims 60 of its 64 KiB: 8 more do not fit.
    const overTenant = heldPush('wide', 8 * KiB);
    // 60 + 30 + 20 KiB announced, over the process's 96 KiB, but no byte arrived: none of it is held.
    const others = [heldPush('other', 30 * KiB), heldPush('other', 20 * KiB)];
    expect(await overTenant).toEqual({ status: 429, code: 'rate_limited' });
    const whole = await call(edge, 'POST', '/api/v1/push', {
      token: tokens.narrow,
      host: 'narrow.localhost',
      body: { items: [{ queue: 'q', payload: 'x'.repeat(60 * KiB) }] },
    });
    expect(whole.status).toBe(201);
    expect(await held).toEqual({ status: 408, code: 'request_timeout' });
    expect(await Promise.all(others)).toEqual(Array(2).fill({ status: 408, code: 'request_timeout' }));
    // Given back when they ended: the whole tenant budget can be claimed again.
    const again = await call(edge, 'POST', '/api/v1/push', {
      token: tokens.wide,
      host: 'wide.localhost',
      body: { items: [{ queue: 'q', payload: 'x'.repeat(60 * KiB) }] },
    });
    expect(again.status).toBe(201);
  });

  it('a full process gives a tenant within its fair share the bytes of a body still arriving of the tenant furthest above its own', async () => {
    // Each on a session of its own, so neither waits on the other's flow-control window.
    const sessions = await Promise.all([h2Session(edge.url), h2Session(edge.url)]);
    try {
      // wide sends 60 of 64 KiB, other 36 of 40: the process holds all of its 96 KiB.
      const wide = heldPush('wide', 64 * KiB, { session: sessions[0], send: 60 * KiB });
      const other = heldPush('other', 40 * KiB, { session: sessions[1], send: 36 * KiB });
      await Promise.all(sessions.map((s) => h2Settled(s)));
      // narrow's share is 96 / 3 = 32 KiB: its 20 KiB push is read, with bytes taken back from wide (60 KiB held, the most).
      const push = await call(edge, 'POST', '/api/v1/push', {
        token: tokens.narrow,
        host: 'narrow.localhost',
        body: { items: [{ queue: 'q', payload: 'x'.repeat(20 * KiB) }] },
      });
      expect(push.status).toBe(201);
      expect(await wide).toEqual({ status: 503, code: 'edge_overloaded' });
      expect(await other).toEqual({ status: 408, code: 'request_timeout' });
    } finally {
      for (const s of sessions) s.destroy();
    }
  });

  it('a body of unknown length takes its chunks as they come: over what is left of its budget, 429 part way', async () => {
    const held = heldPush('wide', 40 * KiB);
    // No content-length: nothing is taken up front; the second 16 KiB chunk passes the 24 KiB left.
    const stream = session.request(
      {
        ':method': 'POST',
        ':path': '/api/v1/push',
        ':authority': 'wide.localhost',
        authorization: `Bearer ${tokens.wide}`,
        'content-type': 'application/json',
      },
      { endStream: false },
    );
    stream.on('error', () => {});
    const answered = new Promise<number>((resolve) => stream.once('response', (h) => resolve(Number(h[':status']))));
    stream.write(Buffer.alloc(16 * KiB, 0x20));
    stream.write(Buffer.alloc(16 * KiB, 0x20));
    expect(await answered).toBe(429);
    stream.resume();
    await waitForEvent(stream, 'close', 10_000, 'the refused stream to close');
    expect(await held).toEqual({ status: 408, code: 'request_timeout' });
  });
});
