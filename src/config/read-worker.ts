/**
 * Reads, substitutes and validates a configuration file off the main thread (loadConfigFileOffThread),
 * and hands the result back in parts: the tenants in chunks, each its own message, so the main
 * thread's event loop serves requests between the chunks it copies in.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { ConfigError, loadConfigFile } from './load.js';

/** Tenants per message: copying one chunk in takes the main thread about a millisecond. */
const CHUNK = 500;

const { path, env } = workerData as { path: string; env: NodeJS.ProcessEnv };
const port = parentPort!;
try {
  const { tenants, ...rest } = await loadConfigFile(path, env);
  port.postMessage({ type: 'head', config: rest });
  const ids = Object.keys(tenants);
  for (let i = 0; i < ids.length; i += CHUNK) {
    const part: typeof tenants = {};
    for (const id of ids.slice(i, i + CHUNK)) part[id] = tenants[id]!;
    port.postMessage({ type: 'tenants', part });
  }
  port.postMessage({ type: 'done' });
} catch (err) {
  port.postMessage({ type: 'error', problems: err instanceof ConfigError ? err.problems : null, message: String((err as Error)?.stack ?? err) });
}
