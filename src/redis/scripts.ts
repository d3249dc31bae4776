/**
 * Running a Lua script by its SHA1 (EVALSHA: the script's text is not sent on every call). A
 * Redis that does not hold the script (restarted, failed over to a replica that never loaded it)
 * answers NOSCRIPT; one EVAL then runs it and leaves it cached for the next EVALSHA.
 */
import type { RedisClient } from './connection.js';

/** True when Redis refused an EVALSHA because it does not hold the script. */
export function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT');
}

/** EVALSHA of `sha`, or EVAL of `lua` after a NOSCRIPT; other errors reject as they came. */
export async function evalScript(redis: RedisClient, sha: string, lua: string, keys: readonly string[], args: readonly (string | number)[]): Promise<unknown> {
  try {
    return await redis.evalsha(sha, keys.length, ...keys, ...args);
  } catch (err) {
    if (isNoScript(err)) return redis.eval(lua, keys.length, ...keys, ...args);
    throw err;
  }
}
