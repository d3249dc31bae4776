/**
 * The streaming answer scanner against JSON.parse: the same facts for any document split at any
 * chunk boundaries (property tests), null for cut or malformed ones, and exact past what a string
 * can hold.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { AnswerScanner, type AnswerFacts } from '../../src/metering/answer-scan.js';

/** The counting rules of src/metering/counts.ts applied to a parsed document: the reference. */
function reference(doc: unknown): AnswerFacts {
  const items = Array.isArray(doc) ? (doc as Array<Record<string, unknown> | null>) : [];
  const top = doc !== null && typeof doc === 'object' && !Array.isArray(doc) ? (doc as Record<string, unknown>) : {};
  const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
  return {
    pushed: items.filter((it) => isObj(it) && ['queued', 'duplicate', 'buffered'].includes(it.status as string)).length,
    acked: items.filter((it) => isObj(it) && it.success === true).length,
    delivered: Array.isArray(top.messages) ? top.messages.length : 0,
    committed: top.success === true,
    leaseId: typeof top.leaseId === 'string' ? top.leaseId : null,
  };
}

function scan(text: string | Buffer, cuts: number[] = []): AnswerFacts | null {
  const buf = typeof text === 'string' ? Buffer.from(text) : text;
  const s = new AnswerScanner();
  let at = 0;
  for (const c of [...new Set(cuts.map((x) => x % (buf.length + 1)))].sort((a, b) => a - b)) {
    s.write(buf.subarray(at, c));
    at = c;
  }
  s.write(buf.subarray(at));
  return s.end();
}

// A document is built as text so that it can repeat keys, escape every character of a key, and
// put whitespace anywhere JSON allows; JSON.parse reads the same text for the reference.
type Doc = { t: 'raw'; v: unknown } | { t: 'arr'; items: Doc[] } | { t: 'obj'; pairs: Array<[string, Doc]> };

/** Strings that look like what the scanner looks for, or that are hard to skip. */
const tricky = fc.constantFrom(
  'messages',
  '"messages"',
  'status',
  'success',
  'leaseId',
  'queued',
  'duplicate',
  'buffered',
  'failed',
  'true',
  '\\',
  '\\"',
  '"',
  '\\\\"',
  'é',
  '😀',
  '\u2028',
  '\u0001',
  '{[',
  ']}',
  ',:',
);
/** Long strings with runs of quotes and backslashes, so chunk cuts land inside and around them. */
const long = fc.array(fc.constantFrom('a', '\\', '"', 'é', 'x'.repeat(40)), { maxLength: 10 }).map((parts) => parts.join(''));
const text = fc.oneof(tricky, long, fc.string({ maxLength: 12 }), fc.string({ unit: 'grapheme', maxLength: 8 }), fc.string({ unit: 'binary', maxLength: 8 }));
const key = fc.oneof({ weight: 3, arbitrary: fc.constantFrom('messages', 'leaseId', 'success', 'status') }, { weight: 2, arbitrary: text });
const scalar = fc.oneof(
  fc.constantFrom(true, false, null, 'queued', 'duplicate', 'buffered', 'failed'),
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  text,
);

const { doc } = fc.letrec<{ doc: Doc }>((tie) => ({
  doc: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    scalar.map((v): Doc => ({ t: 'raw', v })),
    fc.array(tie('doc'), { maxLength: 5 }).map((items): Doc => ({ t: 'arr', items })),
    fc.array(fc.tuple(key, tie('doc')), { maxLength: 5 }).map((pairs): Doc => ({ t: 'obj', pairs })),
  ),
}));

/** Answers shaped like the broker's, with random extra fields and random members. */
const popLike = fc.tuple(fc.array(doc, { maxLength: 6 }), fc.option(fc.string({ maxLength: 20 })), fc.array(fc.tuple(key, doc), { maxLength: 3 })).map(
  ([messages, leaseId, extra]): Doc => ({
    t: 'obj',
    pairs: [...extra, ['leaseId', { t: 'raw', v: leaseId }], ['messages', { t: 'arr', items: messages }], ['success', { t: 'raw', v: true }]],
  }),
);
const itemLike = fc
  .array(
    fc.tuple(
      fc.constantFrom('status', 'success', 'index', 'error'),
      fc.oneof(
        scalar.map((v): Doc => ({ t: 'raw', v })),
        doc,
      ),
    ),
    { maxLength: 4 },
  )
  .map((pairs): Doc => ({ t: 'obj', pairs }));
const arrayLike = fc
  .array(fc.oneof({ weight: 4, arbitrary: itemLike }, { weight: 1, arbitrary: doc }), { maxLength: 8 })
  .map((items): Doc => ({ t: 'arr', items }));
const anyAnswer = fc.oneof(popLike, arrayLike, doc);

interface Style {
  /** Write some key characters as \uXXXX escapes. */
  escapeKeys: boolean;
  ws: string;
}

function escapeAll(s: string): string {
  return `"${[...s].map((ch) => [...ch].map((u) => `\\u${u.charCodeAt(0).toString(16).padStart(4, '0')}`).join('')).join('')}"`;
}

function render(d: Doc, style: Style): string {
  const w = style.ws;
  if (d.t === 'raw') return JSON.stringify(d.v);
  if (d.t === 'arr') return `[${w}${d.items.map((x) => render(x, style)).join(`${w},${w}`)}${w}]`;
  const k = (s: string) => (style.escapeKeys && s.length > 0 && s.charCodeAt(0) % 2 === 0 ? escapeAll(s) : JSON.stringify(s));
  return `{${w}${d.pairs.map(([key, v]) => `${k(key)}${w}:${w}${render(v, style)}`).join(`${w},${w}`)}${w}}`;
}

const style = fc.record({ escapeKeys: fc.boolean(), ws: fc.constantFrom('', ' ', '\n\t', '\r\n  ') });
const cuts = fc.array(fc.nat(), { maxLength: 12 });

describe('AnswerScanner', () => {
  it('agrees with JSON.parse on any document, split at any chunk boundaries', () => {
    fc.assert(
      fc.property(anyAnswer, style, cuts, (d, st, at) => {
        const text = `${st.ws}${render(d, st)}${st.ws}`;
        expect(scan(text, at)).toEqual(reference(JSON.parse(text)));
      }),
      { numRuns: 500 },
    );
  });

  it('agrees with JSON.parse when fed one byte at a time', () => {
    fc.assert(
      fc.property(anyAnswer, style, (d, st) => {
        const text = render(d, st);
        const buf = Buffer.from(text);
        expect(
          scan(
            buf,
            Array.from({ length: buf.length }, (_, i) => i),
          ),
        ).toEqual(reference(JSON.parse(text)));
      }),
      { numRuns: 200 },
    );
  });

  it('gives null for every cut of a container document (a body broken off)', () => {
    fc.assert(
      fc.property(fc.oneof(popLike, arrayLike), style, fc.nat(), cuts, (d, st, end, at) => {
        const buf = Buffer.from(render(d, st));
        expect(scan(buf.subarray(0, end % buf.length), at)).toBeNull();
      }),
      { numRuns: 500 },
    );
  });

  it.each([
    ['trailing bytes', '[{"status":"queued"}] x'],
    ['mismatched closer', '{"messages":[1,2}'],
    ['trailing comma in an array', '[{"status":"queued"},]'],
    ['trailing comma in an object', '{"success":true,}'],
    ['a missing colon', '{"success" true}'],
    ['two top-level values', '{} {}'],
    ['a misspelt literal', '{"success":tru}'],
    ['a capitalised literal', '{"success":True}'],
    ['a bare word', '[queued]'],
    ['a number with a plus sign', '[+1]'],
    ['an empty body', ''],
    ['a cut string', '{"leaseId":"abc'],
  ])('gives null for %s', (_name, text) => {
    expect(() => JSON.parse(text)).toThrow();
    expect(scan(text)).toBeNull();
  });

  it('reads keys and values written with escapes, and ignores look-alikes inside strings', () => {
    expect(scan('{"m\\u0065ssages":[1,2,3],"le\\u0061seId":"L\\"1","x":"\\"messages\\":[1]"}')).toMatchObject({ delivered: 3, leaseId: 'L"1' });
    expect(scan('[{"st\\u0061tus":"qu\\u0065ued"},{"status":"\\"queued\\""},{"note":"{\\"status\\":\\"queued\\"}"}]')).toMatchObject({ pushed: 1 });
    // A string ending in backslashes split across chunks right before its closing quote.
    const text = '{"x":"ab\\\\\\\\","messages":[{},{}]}';
    for (let c = 0; c <= text.length; c++) expect(scan(text, [c])).toMatchObject({ delivered: 2 });
  });

  it('takes the last of duplicate keys, as JSON.parse does', () => {
    expect(scan('{"messages":[1,2],"messages":{"a":1}}')).toMatchObject({ delivered: 0 });
    expect(scan('{"messages":5,"messages":[1]}')).toMatchObject({ delivered: 1 });
    expect(scan('[{"status":"queued","status":"failed"},{"success":true,"success":false},{"success":false,"success":true}]')).toMatchObject({
      pushed: 0,
      acked: 1,
    });
    expect(scan('{"success":true,"success":false}')).toMatchObject({ committed: false });
  });

  it('keeps no lease id longer than its bound', () => {
    expect(scan(JSON.stringify({ leaseId: 'x'.repeat(300), messages: [1] }))).toEqual({ pushed: 0, acked: 0, delivered: 1, committed: false, leaseId: null });
  });

  it('counts past any nesting depth without keeping it', () => {
    const depth = 100_000;
    const deep = `${'['.repeat(depth)}${']'.repeat(depth)}`;
    expect(scan(`{"messages":[${deep},${deep}],"leaseId":"L"}`)).toMatchObject({ delivered: 2, leaseId: 'L' });
    // Objects past the tracked depth are still read.
    expect(scan(`{"messages":[${'{"a":['.repeat(100)}1${']}'.repeat(100)}]}`)).toMatchObject({ delivered: 1 });
  });

  it('counts an answer larger than a string can hold (600 MiB), exactly', () => {
    // 600 messages of 1 MiB, streamed from one reused buffer: nothing the size of the answer exists.
    const data = Buffer.alloc(1 << 20, 'a');
    data.write('\\"messages\\":[', 1000);
    const s = new AnswerScanner();
    s.write(Buffer.from('{"success":true,"leaseId":"0197f2b2-lease","messages":['));
    const open = Buffer.from('{"id":"m","data":"');
    const close = Buffer.from('"}');
    for (let i = 0; i < 600; i++) {
      s.write(i === 0 ? open : Buffer.concat([Buffer.from(','), open]));
      for (let at = 0; at < data.length; at += 65536) s.write(data.subarray(at, at + 65536));
      s.write(close);
    }
    s.write(Buffer.from(']}'));
    expect(s.end()).toEqual({ pushed: 0, acked: 0, delivered: 600, committed: true, leaseId: '0197f2b2-lease' });
  });
});
