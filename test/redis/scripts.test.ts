/** EVALSHA with the EVAL fallback the limiter and leased mode share. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { scriptSha } from '../../src/limits/script.js';
import { evalScript, isNoScript } from '../../src/redis/scripts.js';
import { commandCalls, connectTest, PrivateRedis, uniquePrefix } from '../helpers/redis.js';

let server: PrivateRedis;
let client: Redis;
let probe: Redis;

beforeAll(async () => {
  server = await PrivateRedis.start();
  client = await connectTest(server.url, 2000);
  probe = await connectTest(server.url, 2000);
});
afterAll(async () => {
  client.disconnect();
  probe.disconnect();
  await server.kill();
});

const LUA = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
const SHA = scriptSha(LUA);

describe('evalScript', () => {
  it('runs a script Redis does not hold with one EVAL, then by its SHA alone', async () => {
    const key = `${uniquePrefix()}n`;
    await probe.script('FLUSH');
    const before = await commandCalls(probe);
    expect(await evalScript(client, SHA, LUA, [key], [2])).toBe(2);
    expect(await evalScript(client, SHA, LUA, [key], [3])).toBe(5);
    const after = await commandCalls(probe);
    expect((after.get('evalsha') ?? 0) - (before.get('evalsha') ?? 0)).toBe(2);
    expect((after.get('eval') ?? 0) - (before.get('eval') ?? 0)).toBe(1);
  });

  it('rejects with any other error as it came, without an EVAL', async () => {
    const bad = "return redis.call('NOSUCHCOMMAND')";
    await probe.script('LOAD', bad);
    const before = await commandCalls(probe);
    const err = await evalScript(client, scriptSha(bad), bad, [`${uniquePrefix()}x`], []).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(isNoScript(err)).toBe(false);
    const after = await commandCalls(probe);
    expect((after.get('eval') ?? 0) - (before.get('eval') ?? 0)).toBe(0);
  });
});
