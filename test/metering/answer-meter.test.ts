/** The answer meter: plain and compressed answers give the scanner's facts; broken codings say so. */
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { openAnswerMeter, type AnswerMeter, type MeterOutcome } from '../../src/metering/answer-meter.js';

const answer = Buffer.from(JSON.stringify({ success: true, leaseId: 'L', messages: Array.from({ length: 500 }, (_, i) => ({ i, data: 'x'.repeat(200) })) }));

/** Feeds `body` in 1000-byte chunks, waiting for drain whenever the meter asks to. */
async function meter(m: AnswerMeter, body: Buffer): Promise<MeterOutcome> {
  let resume: (() => void) | null = null;
  m.onDrain(() => resume?.());
  for (let at = 0; at < body.length; at += 1000) {
    if (!m.write(body.subarray(at, at + 1000))) await new Promise<void>((r) => (resume = r));
  }
  return new Promise((resolve) => m.end(resolve));
}

describe('openAnswerMeter', () => {
  it.each([
    ['absent', null, answer],
    ['identity', 'identity', answer],
    ['gzip', 'gzip', gzipSync(answer)],
    ['x-gzip', 'X-Gzip', gzipSync(answer)],
    ['deflate', 'deflate', deflateSync(answer)],
    ['br', 'br', brotliCompressSync(answer)],
  ])('reads an answer with the coding %s', async (_n, coding, body) => {
    expect(await meter(openAnswerMeter(coding), body)).toEqual({
      facts: { pushed: 0, acked: 0, delivered: 500, committed: true, leaseId: 'L' },
      problem: null,
    });
  });

  it.each([
    ['an unknown coding', 'zstd', answer],
    ['a list of codings', 'gzip, br', gzipSync(answer)],
    ['corrupt gzip', 'gzip', answer],
    ['cut gzip', 'gzip', gzipSync(answer).subarray(0, 500)],
  ])('reports %s as undecodable', async (_n, coding, body) => {
    expect(await meter(openAnswerMeter(coding), body)).toEqual({ facts: null, problem: 'undecodable' });
  });

  it('reports a cut plain answer as malformed', async () => {
    expect(await meter(openAnswerMeter(null), answer.subarray(0, answer.length - 1))).toEqual({ facts: null, problem: 'malformed' });
  });
});

describe('a compressed answer bomb', () => {
  it('stops decoding past the bound and meters the answer as undecodable', async () => {
    // 64 MiB of JSON whitespace gzips to about 64 KB: a 1000:1 ratio no real answer has.
    const bomb = gzipSync(Buffer.concat([Buffer.from('['), Buffer.alloc(64 * 1024 * 1024, 0x20), Buffer.from(']')]), { level: 1 });
    expect(await meter(openAnswerMeter('gzip'), bomb)).toEqual({ facts: null, problem: 'undecodable' });
  });
});
