/**
 * Waiting on signals instead of time: a test waits for the thing it is about to assert on (a
 * condition, an event, a log line), with a generous timeout for a loaded CI machine and a failure
 * message that names what was awaited.
 */
import type { EventEmitter } from 'node:events';

/** How often a condition is polled: short, so a wait costs little beyond its signal. */
const POLL_MS = 10;

/** Polls until `cond` holds, or throws after `timeoutMs` naming `what`. */
export async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** Polls `get` until it returns a value other than undefined, and returns that value. */
export async function waitForValue<T>(get: () => T | undefined | Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  let value: T | undefined;
  await waitFor(
    async () => {
      value = await get();
      return value !== undefined;
    },
    timeoutMs,
    what,
  );
  return value as T;
}

/** Resolves with the arguments of the next `name` event of `emitter`, or throws after `timeoutMs`. */
export function waitForEvent(emitter: EventEmitter, name: string, timeoutMs: number, what = `'${name}' event`): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    const onEvent = (...args: unknown[]): void => {
      clearTimeout(timer);
      resolve(args);
    };
    const timer = setTimeout(() => {
      emitter.off(name, onEvent);
      reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`));
    }, timeoutMs);
    emitter.once(name, onEvent);
  });
}
