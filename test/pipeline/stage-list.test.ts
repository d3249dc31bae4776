/** docs/architecture.md's stage list is the code's: same names, same order, one numbering; and each route's list is compiled once. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PRELUDE, PUBLIC_STAGES, stagesOf, TENANT_STAGES } from '../../src/pipeline/chain.js';
import { ROUTES, type RouteSpec } from '../../src/routes/table.js';

const doc = readFileSync(new URL('../../docs/architecture.md', import.meta.url), 'utf8');
const byName = (name: string): RouteSpec => ROUTES.find((r) => r.name === name)!;

describe('the request path stage list', () => {
  it("docs/architecture.md numbers the prelude and a tenant route's stages 1..n, in the code's order", () => {
    const section = doc.slice(doc.indexOf('## The request path'));
    const rows = [...section.matchAll(/^\| (\d+) \| `(\w+)` \|/gm)].map((m) => [Number(m[1]), m[2]]);
    const names = [...PRELUDE, ...TENANT_STAGES].map((s) => s.name);
    expect(rows).toEqual(names.map((n, i) => [i + 1, n]));
  });

  it("docs/architecture.md names a public route's stages in the code's order", () => {
    const line = /A public route \([^)]*\) runs, after the prelude: (.*?)[:.]/.exec(doc)?.[1] ?? '';
    expect([...line.matchAll(/`(\w+)`/g)].map((m) => m[1])).toEqual(PUBLIC_STAGES.map((s) => s.name));
  });

  it('a route runs only the stages that apply to it: the storage gate only where it writes, a public route none of the tenant stages', () => {
    const names = (r: RouteSpec) => stagesOf(r).map((s) => s.name);
    expect(names(byName('push'))).toContain('storage');
    expect(names(byName('pop.queue'))).not.toContain('storage');
    expect(names(byName('pop.queue'))).toContain('admit');
    expect(stagesOf(ROUTES.find((r) => r.access === 'public')!)).toBe(PUBLIC_STAGES);
  });

  it("compiles a route's list once, and afresh for a new route object (a reload)", () => {
    const push = byName('push');
    expect(stagesOf(push)).toBe(stagesOf(push));
    const reloaded = { ...push };
    expect(stagesOf(reloaded)).not.toBe(stagesOf(push));
    expect(stagesOf(reloaded)).toEqual(stagesOf(push));
  });
});
