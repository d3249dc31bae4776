/**
 * The forwarded path means one route to every reader: the edge's own matcher, a WHATWG URL parser
 * (browsers, undici, many frameworks), Node's legacy parser and a plain byte-wise router. A raw
 * `\` used to reach the broker verbatim and a WHATWG parser read it as `/`.
 */
import { parse as legacyParse } from 'node:url';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isEdgeError } from '../../src/errors.js';
import { compileRoutes, normalizeTarget } from '../../src/routes/match.js';
import { ROUTES } from '../../src/routes/table.js';

const matcher = compileRoutes(ROUTES);
const CANONICAL = /^(\/([A-Za-z0-9\-._~!$&'()*+,;=:@]|%[0-9A-F]{2})+)+$|^\/$/;

/** A byte-wise router: split on `/`, decode each segment. */
function byteWiseSegments(p: string): string[] {
  return p
    .split('/')
    .slice(1)
    .map((s) => decodeURIComponent(s));
}

function routeOf(path: string): string | null {
  const m = matcher.match('GET', path) ?? matcher.match('POST', path) ?? matcher.match('DELETE', path);
  return m ? `${m.route.name} ${JSON.stringify(m.params)}` : null;
}

/** Targets as Node hands them over: one latin1 char per byte, any byte but CR, LF, space and NUL-like controls. */
const byteChar = fc.oneof(
  fc.constantFrom(
    '/',
    '\\',
    '.',
    '%',
    '2',
    'e',
    'E',
    'f',
    'F',
    '5',
    'c',
    'C',
    '#',
    '?',
    '|',
    '^',
    '[',
    ']',
    '`',
    '{',
    '}',
    '"',
    '<',
    '>',
    "'",
    ';',
    ':',
    '@',
    'a',
    'api',
    'v1',
    'resources',
    'system',
    'maintenance',
    'push',
    'pop',
    'queue',
  ),
  fc.integer({ min: 0x21, max: 0xff }).map((c) => String.fromCharCode(c)),
);
const target = fc.array(byteChar, { minLength: 0, maxLength: 40 }).map((cs) => `/${cs.join('')}`);

describe('forwarded paths', () => {
  it("the issue's backslash path never reaches a broker with a backslash", () => {
    const t = normalizeTarget('/api/v1/resources/x\\..\\..\\system\\maintenance');
    if (isEdgeError(t)) throw new Error(t.message);
    expect(t.path).toBe('/api/v1/resources/x%5C..%5C..%5Csystem%5Cmaintenance');
    expect(new URL(t.path, 'http://broker').pathname).toBe(t.path);
    expect(routeOf(t.path)).toMatch(/^resources\.read /);
  });

  it.each([
    ['/api/v1/pop/queue/a#b', '/api/v1/pop/queue/a%23b'],
    ['/api/v1/pop/queue/a|b', '/api/v1/pop/queue/a%7Cb'],
    ['/api/v1/pop/queue/caf\u00c3\u00a9', '/api/v1/pop/queue/caf%C3%A9'],
    ['/api/v1/pop/queue/a b', '/api/v1/pop/queue/a%20b'],
  ])('%s is forwarded as %s', (input, path) => {
    expect(normalizeTarget(input)).toEqual({ path, query: '' });
  });

  it('keeps the fast path for canonical paths', () => {
    expect(normalizeTarget('/api/v1/pop/queue/orders')).toEqual({ path: '/api/v1/pop/queue/orders', query: '' });
  });

  it("no forwarded path means a different route to WHATWG URL, Node's parser or a byte-wise router", () => {
    fc.assert(
      fc.property(target, (t) => {
        const n = normalizeTarget(t);
        if (isEdgeError(n)) {
          expect(n.code).toBe('invalid_request');
          return;
        }
        const p = n.path;
        expect(p).toMatch(CANONICAL);
        // Re-normalising changes nothing: the broker's own normalisation sees the same route.
        expect(normalizeTarget(p)).toEqual({ path: p, query: '' });
        // WHATWG: no `\` -> `/`, no fragment, no dot segments (also `%2e`), no re-encoding.
        expect(new URL(p, 'http://broker').pathname).toBe(p);
        // Node's legacy parser turns `\` into `/` and escapes `'`: the same segments must come out.
        expect(byteWiseSegments(legacyParse(p).pathname ?? '')).toEqual(byteWiseSegments(p));
        // A byte-wise router sees the segments the edge matched, none of them a dot segment.
        const segs = byteWiseSegments(p);
        for (const s of segs) expect(s === '.' || s === '..').toBe(false);
        expect(routeOf(new URL(p, 'http://broker').pathname)).toBe(routeOf(p));
      }),
      { numRuns: 3000 },
    );
  });
});
