/**
 * Reads, substitutes and validates configuration files off the main thread (loadConfigFileOffThread),
 * and hands each result back in parts: the tenants in chunks, each its own message, so the main
 * thread's event loop serves requests between the chunks it copies in. The worker stays for the
 * next reload: a worker's exit blocks the main thread while its heap is freed (about a second
 * after reading 100,000 tenants).
 */
import { parentPort } from 'node:worker_threads';
import { ConfigError, loadConfigFile } from './load.js';
import { splitConfig } from './parts.js';

const port = parentPort!;
/** Resolves when the main thread asks for the next chunk: messages waiting in a port are all copied in one turn of its event loop, so they are sent one at a time. */
let next: (() => void) | null = null;
const asked = (): Promise<void> =>
  new Promise((resolve) => {
    next = resolve;
  });

port.on('message', async (m: { type: 'read'; path: string; env: NodeJS.ProcessEnv } | { type: 'next' }) => {
  if (m.type === 'next') {
    next?.();
    return;
  }
  const { path, env } = m;
  try {
    const { head, parts } = splitConfig(await loadConfigFile(path, env));
    port.postMessage({ type: 'head', config: head });
    for (const part of parts) {
      const more = asked();
      port.postMessage({ type: 'tenants', part });
      await more;
    }
    port.postMessage({ type: 'done' });
  } catch (err) {
    port.postMessage({ type: 'error', problems: err instanceof ConfigError ? err.problems : null, message: String((err as Error)?.stack ?? err) });
  }
});
