/**
 * Tokens minted by Queen's own tools carry one role as `role: "read-write"`; the broker reads the
 * `roles` array when present, else that string. Through a real socket: such a token is accepted
 * with the default settings, never widened by a second claim, and a 403 names the claim it read.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, forwarded, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(testConfig([broker.url]));
});

afterAll(async () => {
  await edge.close();
  await broker.close();
});

const pop = (t: string) => call(edge, 'GET', '/api/v1/pop/queue/q', { token: t });
const dropQueue = (t: string) => call(edge, 'DELETE', '/api/v1/resources/queues/q', { token: t });

describe("Queen's single-role tokens", () => {
  it('a token with only `role: "read-write"` is forwarded with the default rolesClaim', async () => {
    const before = forwarded(broker).length;
    const r = await pop(await token({ role: 'read-write', tenant: 'acme' }));
    expect(r.status).toBe(204);
    expect(forwarded(broker).length).toBe(before + 1);
  });

  it('`role` never widens a `roles` array: the array is read and the 403 says so', async () => {
    const r = await dropQueue(await token({ roles: ['read-only'], role: 'admin', tenant: 'acme' }));
    expect(r.status).toBe(403);
    expect((r.json as { error: string }).error).toContain('read from claim "roles"');
  });

  it('a 403 on a single-role token names the `role` claim it read', async () => {
    const r = await dropQueue(await token({ role: 'read-write', tenant: 'acme' }));
    expect(r.status).toBe(403);
    expect((r.json as { error: string }).error).toContain('"read-write"; roles read from claim "role"');
  });

  it('a token with neither claim gets a 403 naming both', async () => {
    const r = await pop(await token({ tenant: 'acme' }));
    expect(r.status).toBe(403);
    expect((r.json as { error: string }).error).toContain('no "roles" or "role" claim');
  });

  it('a `role` claim that is not a string is refused, not guessed at', async () => {
    const r = await pop(await token({ role: ['admin'], tenant: 'acme' } as Record<string, unknown>));
    expect(r.status).toBe(401);
  });
});
