/** An edge with store.url set but no store answering refuses to start, in one line, never a stack. */
import { afterEach, describe, expect, it } from 'vitest';
import { testConfig } from '../helpers/edge.js';
import { edgeTracker, freePort } from '../deploy/edge-process.js';

const edges = edgeTracker();
afterEach(() => edges.cleanup());

describe('start with the store unreachable', { timeout: 60_000 }, () => {
  it('exits 1 with what to do; no listener is left', async () => {
    const port = await freePort();
    const edge = await edges.start(testConfig(['http://127.0.0.1:1'], { store: { url: `postgres://postgres@127.0.0.1:${port}/postgres`, timeoutMs: 500 } }));
    expect((await edge.exited).code).toBe(1);
    expect(edge.stderr()).toMatch(/^queen-edge: store\.url is set but the durable store could not be opened \(.+\): .*start PostgreSQL or correct store\.url/m);
    expect(edge.stderr()).not.toContain('    at ');
  });
});
