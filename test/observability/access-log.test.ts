/**
 * The access line is the line pino would write for the same record, whatever the client put in it;
 * through the edge it says who asked for what: client address, host, path, statuses.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, h2Session, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';
import { accessLine, capturingLogger } from '../helpers/logs.js';
import { accessLogWriter, PATH_CHARS, targetParts, type AccessRecord } from '../../src/observability/access-log.js';
import { createLogger, processLogger } from '../../src/observability/log.js';

function capture(): { stream: Writable; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l !== '') lines.push(l);
      done();
    },
  });
  return { stream, lines };
}

const record = (over: Partial<AccessRecord> = {}): AccessRecord => ({
  reqId: '0197f2b1-7c1e-7000-8000-000000000001',
  tenant: 'acme',
  sub: 'user"\n\\\u2028\u0000é',
  route: 'push',
  method: 'POST',
  status: 201,
  code: null,
  bytesIn: 64,
  bytesOut: 31,
  ms: 3,
  broker: 'http://b1:6632',
  proto: '2.0',
  trace: '"}{"level":60',
  client: '203.0.113.9',
  host: 'acme.example"\n',
  path: '/api/v1/pop/queue/q"\u0000',
  queryLength: 17,
  upstreamStatus: 201,
  ...over,
});

const withoutTime = (line: string) => {
  const o = JSON.parse(line) as Record<string, unknown>;
  expect(typeof o.time).toBe('number');
  delete o.time;
  return o;
};

describe('access log line', () => {
  it.each([
    ['an admitted request with hostile sub and trace', record()],
    [
      'a refusal without tenant, route, identity or broker',
      record({ tenant: null, sub: null, route: null, code: 'unauthorized', status: 401, broker: null, trace: null, method: 'DELETE', upstreamStatus: null }),
    ],
  ])("equals pino's own line for %s, bindings of child loggers included", async (_name, r) => {
    const ours = capture();
    const theirs = capture();
    accessLogWriter(createLogger('info', ours.stream).child({ worker: 2 }))(r);
    createLogger('info', theirs.stream).child({ worker: 2 }).info(r, 'request');
    await new Promise((resolve) => setImmediate(resolve));
    expect(ours.lines).toHaveLength(1);
    expect(withoutTime(ours.lines[0]!)).toEqual(withoutTime(theirs.lines[0]!));
  });

  it("log.time iso and log.levelNames: the same line as pino's with those settings", async () => {
    const ours = capture();
    const theirs = capture();
    const style = { time: 'iso', levelNames: true } as const;
    accessLogWriter(createLogger('info', ours.stream, style))(record());
    createLogger('info', theirs.stream, style).info(record(), 'request');
    await new Promise((resolve) => setImmediate(resolve));
    const line = JSON.parse(ours.lines[0]!) as Record<string, unknown>;
    expect(line.level).toBe('info');
    expect(line.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const other = JSON.parse(theirs.lines[0]!) as Record<string, unknown>;
    expect({ ...line, time: 0 }).toEqual({ ...other, time: 0 });
  });

  it('a path longer than PATH_CHARS is cut and marked; the query is only counted', () => {
    expect(targetParts(`/p/${'x'.repeat(2 * PATH_CHARS)}?token=secret`)).toEqual({ path: `/p/${'x'.repeat(PATH_CHARS - 3)}…`, queryLength: 12 });
    expect(targetParts('/api/v1/push')).toEqual({ path: '/api/v1/push', queryLength: 0 });
  });

  it('log.format pretty: one line per request, a sentence with client, method, host, path and status', async () => {
    const out = capture();
    const log = processLogger({ level: 'info', format: 'pretty' }, false, out.stream);
    accessLogWriter(log)(record({ host: 'acme.example', path: '/api/v1/push' }));
    await new Promise<void>((resolve) => log.flush(() => resolve()));
    await expect.poll(() => out.lines.length).toBe(1);
    expect(out.lines[0]).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: 203\.0\.113\.9 POST acme\.example\/api\/v1\/push\?\(17 chars\) → 201 \(broker 201\) 3 ms /);
    expect(out.lines[0]).toContain('tenant acme route push');
  });

  it('writes nothing while the level is above info, and follows a level change', async () => {
    const out = capture();
    const log = createLogger('warn', out.stream);
    const write = accessLogWriter(log);
    write(record());
    log.level = 'info';
    write(record({ reqId: 'second' }));
    await new Promise((resolve) => setImmediate(resolve));
    expect(out.lines.map((l) => (JSON.parse(l) as { reqId: string }).reqId)).toEqual(['second']);
  });

  it("leaves the line to pino on a stream that wants pino's metadata (multistream)", async () => {
    const out = capture();
    const log = pino({ level: 'info' }, pino.multistream([{ stream: out.stream }]));
    accessLogWriter(log)(record());
    await new Promise((resolve) => setImmediate(resolve));
    expect(JSON.parse(out.lines[0]!)).toMatchObject({ msg: 'request', sub: record().sub, level: 30 });
  });
});

describe('access log line of a request through the edge', () => {
  let broker: BrokerDouble;
  let h: EdgeHarness;
  const captured = capturingLogger('info');
  const line = (reqId: unknown) => accessLine(captured, reqId);

  beforeAll(async () => {
    broker = await startBrokerDouble({ name: 'b1' });
    h = await startEdge(testConfig([broker.url], { log: { level: 'info' } }), { log: captured.log });
  });
  afterAll(async () => {
    await h?.close();
    await broker?.close();
  });

  it("carries the client address, host, path, query length (not the query) and the broker's status", async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    await call(h, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'logged', payload: 1 }] } });
    const r = await call(h, 'GET', '/api/v1/pop/queue/logged?consumerGroup=secret-group&batch=1', { token: tok, host: 'ACME.localhost:8443' });
    expect(r.status).toBe(200);
    const logged = await line(r.headers['x-request-id']);
    expect(logged).toMatchObject({
      client: '127.0.0.1',
      host: 'acme.localhost',
      method: 'GET',
      path: '/api/v1/pop/queue/logged',
      queryLength: 'consumerGroup=secret-group&batch=1'.length,
      status: 200,
      upstreamStatus: 200,
      tenant: 'acme',
      route: 'pop.queue',
    });
    expect(JSON.stringify(logged)).not.toContain('secret-group');
  });

  /** One h2 request on its own session: the answer's status, request id and body length as received. */
  async function h2Call(
    path: string,
    opts: { method?: string; token?: string; body?: string } = {},
  ): Promise<{ status: number; reqId: unknown; received: number }> {
    const session = await h2Session(h.url);
    try {
      const headers: Record<string, string> = { ':method': opts.method ?? 'GET', ':path': path, ':authority': 'acme.localhost' };
      if (opts.token) headers.authorization = `Bearer ${opts.token}`;
      if (opts.body !== undefined) headers['content-type'] = 'application/json';
      const stream = session.request(headers, { endStream: opts.body === undefined });
      if (opts.body !== undefined) stream.end(opts.body);
      return await new Promise((resolve, reject) => {
        let status = 0;
        let reqId: unknown;
        let received = 0;
        stream.on('response', (hd) => {
          status = hd[':status'] as number;
          reqId = hd['x-request-id'];
        });
        stream.on('data', (c: Buffer) => {
          received += c.length;
        });
        stream.on('error', reject);
        stream.on('close', () => resolve({ status, reqId, received }));
      });
    } finally {
      session.close();
    }
  }

  it('names the client on every line: h1 and h2, with and without a body, admitted or refused', async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const push = JSON.stringify({ items: [{ queue: 'client-logged', payload: 1 }] });
    const h2Push = await h2Call('/api/v1/push', { method: 'POST', token: tok, body: push });
    expect(h2Push.status).toBe(201);
    const h2Pop = await h2Call('/api/v1/pop/queue/client-logged?batch=1', { token: tok });
    expect(h2Pop.status).toBe(200);
    const h2Refused = await h2Call('/api/v1/push', { method: 'POST', body: push });
    expect(h2Refused.status).toBe(401);
    const h1Push = await call(h, 'POST', '/api/v1/push', { token: tok, body: push });
    const h1Refused = await call(h, 'GET', '/api/v1/pop/queue/client-logged');
    for (const [proto, reqId] of [
      ['2.0', h2Push.reqId],
      ['2.0', h2Pop.reqId],
      ['2.0', h2Refused.reqId],
      ['1.1', h1Push.headers['x-request-id']],
      ['1.1', h1Refused.headers['x-request-id']],
    ] as const) {
      expect(await line(reqId)).toMatchObject({ client: '127.0.0.1', proto });
    }
  });

  it("bytesOut is the body the client received: a relayed answer and the edge's own refusal, h1 and h2", async () => {
    const tok = await token({ roles: ['read-write'], tenant: 'acme' });
    const h2Refused = await h2Call('/api/v1/pop/queue/bytes-out');
    expect(h2Refused.status).toBe(401);
    expect(h2Refused.received).toBeGreaterThan(0);
    const h1Refused = await call(h, 'POST', '/api/v1/push', { body: { items: [] } });
    const h1Pushed = await call(h, 'POST', '/api/v1/push', { token: tok, body: { items: [{ queue: 'bytes-out', payload: 1 }] } });
    expect(h1Pushed.status).toBe(201);
    expect((await line(h2Refused.reqId)).bytesOut).toBe(h2Refused.received);
    expect((await line(h1Refused.headers['x-request-id'])).bytesOut).toBe(Buffer.byteLength(h1Refused.text));
    expect((await line(h1Pushed.headers['x-request-id'])).bytesOut).toBe(Buffer.byteLength(h1Pushed.text));
  });

  it('an edge refusal has no upstream status', async () => {
    const r = await call(h, 'POST', '/api/v1/push', { body: { items: [] } });
    expect(r.status).toBe(401);
    expect(await line(r.headers['x-request-id'])).toMatchObject({
      status: 401,
      code: 'unauthorized',
      upstreamStatus: null,
      path: '/api/v1/push',
      queryLength: 0,
    });
  });
});
