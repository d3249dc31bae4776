/** EVALSHA with the EVAL fallback the limiter and leased mode share. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { scriptSha } from '../../src/limits/script.js';
import { evalScript, isNoScript } from '../../src/redis/scripts.js';
import { commandCalls, connectTest, PrivateRedis, uniquePrefix } from '../helpers/redis.js';

// One connection both runs the scripts and reads the server's command counts (INFO counts every client).
let server: PrivateRedis;
let redis: Redis;
beforeAll(async () => {
  server = await PrivateRedis.start();
  redis = await connectTest(server.url, 2000);
});
afterAll(async () => {
  redis.disconnect();
  await server.kill();
});

const LUA = "return redis.call('INCRBY', KEYS[1], ARGV[1])";
const SHA = scriptSha(LUA);

describe('evalScript', () => {
  it('runs a script Redis does not hold with one EVAL, then by its SHA alone', async () => {
    const key = `${uniquePrefix()}n`;
    await redis.script('FLUSH');
    const before = await commandCalls(redis);
    expect(await evalScript(redis, SHA, LUA, [key], [2])).toBe(2);
    expect(await evalScript(redis, SHA, LUA, [key], [3])).toBe(5);
    const after = await commandCalls(redis);
    expect((after.get('evalsha') ?? 0) - (before.get('evalsha') ?? 0)).toBe(2);
    expect((after.get('eval') ?? 0) - (before.get('eval') ?? 0)).toBe(1);
  });

  it('rejects with any other error as it came, without an EVAL', async () => {
    const bad = "return redis.call('NOSUCHCOMMAND')";
    await redis.script('LOAD', bad);
    const before = await commandCalls(redis);
    const err = await evalScript(redis, scriptSha(bad), bad, [`${uniquePrefix()}x`], []).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(isNoScript(err)).toBe(false);
    const after = await commandCalls(redis);
    expect((after.get('eval') ?? 0) - (before.get('eval') ?? 0)).toBe(0);
  });
});
