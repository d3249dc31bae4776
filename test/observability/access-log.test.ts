/** The access line is the line pino would write for the same record, whatever the client put in it. */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { accessLogWriter, type AccessRecord } from '../../src/observability/access-log.js';
import { createLogger } from '../../src/observability/log.js';

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
    ['a refusal without tenant, route, identity or broker', record({ tenant: null, sub: null, route: null, code: 'unauthorized', status: 401, broker: null, trace: null, method: 'DELETE' })],
  ])('equals pino\'s own line for %s, bindings of child loggers included', async (_name, r) => {
    const ours = capture();
    const theirs = capture();
    accessLogWriter(createLogger('info', ours.stream).child({ worker: 2 }))(r);
    createLogger('info', theirs.stream).child({ worker: 2 }).info(r, 'request');
    await new Promise((resolve) => setImmediate(resolve));
    expect(ours.lines).toHaveLength(1);
    expect(withoutTime(ours.lines[0]!)).toEqual(withoutTime(theirs.lines[0]!));
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

  it('leaves the line to pino on a stream that wants pino\'s metadata (multistream)', async () => {
    const out = capture();
    const log = pino({ level: 'info' }, pino.multistream([{ stream: out.stream }]));
    accessLogWriter(log)(record());
    await new Promise((resolve) => setImmediate(resolve));
    expect(JSON.parse(out.lines[0]!)).toMatchObject({ msg: 'request', sub: record().sub, level: 30 });
  });
});
