/**
 * Reads, substitutes and validates configuration files off the main thread (loadConfigFileOffThread),
 * and hands each result back in parts: the tenant ids in chunks, each its own message, so the main
 * thread's event loop serves requests between the chunks it takes in. The worker stays for the
 * next reload: a worker's exit blocks the main thread while its heap is freed (about a second
 * after reading 100,000 tenants).
 *
 * A read comes with the tenants of the one it follows, as shared text (tenant-texts.ts): only the tenants
 * that differ from them cross, and the main thread takes the others from the map it holds.
 * Copying 100,000 tenants into the main thread's heap costs it more than a second of work and
 * collections of tens of milliseconds; a reload that changes one tenant copies one.
 */
import { readlinkSync } from 'node:fs';
import { constants, setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import { ConfigError, loadConfigFile } from './load.js';
import type { RawConfig } from './schema.js';
import { lineKey, linesById, shareLines, tenantLine } from './tenant-texts.js';

/** Tenants per message at most: copying them in takes the main thread about a millisecond. */
const CHUNK_TENANTS = 500;
/** Ids per message at most: a tenant the main thread already holds costs it one insertion. */
const CHUNK_IDS = 1000;

/** A read asked for; `base`: the tenantTexts of the read it follows, null for none. */
export interface ReadRequest {
  readonly type: 'read';
  readonly path: string;
  readonly env: NodeJS.ProcessEnv;
  readonly base: SharedArrayBuffer | null;
}

/**
 * This thread at a lower priority: a reload's parse (seconds of CPU at 100,000 tenants) gives way
 * to the thread serving requests when the machine is busy. Linux names a thread by its id
 * (/proc/thread-self); elsewhere, or where refused, it runs as it is.
 */
function giveWay(): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), constants.priority.PRIORITY_BELOW_NORMAL);
  } catch {
    // Not Linux, or not allowed: the reader shares the CPU evenly.
  }
}
giveWay();

const port = parentPort!;
/** Resolves when the main thread asks for the next chunk: messages waiting in a port are all copied in one turn of its event loop, so they are sent one at a time. */
let next: (() => void) | null = null;
const asked = (): Promise<void> =>
  new Promise((resolve) => {
    next = resolve;
  });

/** Sends `ids` in order, with the tenants the main thread lacks (`send`), one chunk per request for more. */
async function sendTenants(tenants: RawConfig['tenants'], ids: readonly string[], send: (i: number) => boolean): Promise<void> {
  let chunk: string[] = [];
  let part: RawConfig['tenants'] = {};
  let carried = 0;
  const flush = async (): Promise<void> => {
    const more = asked();
    port.postMessage({ type: 'tenants', ids: chunk, part });
    chunk = [];
    part = {};
    carried = 0;
    await more;
  };
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    chunk.push(id);
    if (send(i)) {
      part[id] = tenants[id]!;
      carried++;
    }
    if (carried === CHUNK_TENANTS || chunk.length === CHUNK_IDS) await flush();
  }
  if (chunk.length > 0) await flush();
}

port.on('message', async (m: ReadRequest | { type: 'next' }) => {
  if (m.type === 'next') {
    next?.();
    return;
  }
  try {
    const { tenants, ...rest } = await loadConfigFile(m.path, m.env);
    const ids = Object.keys(tenants);
    const keys = ids.map(lineKey);
    const lines = ids.map((id, i) => tenantLine(keys[i]!, tenants[id]!));
    const before = m.base === null ? null : linesById(m.base);
    const differs = ids.map((_, i) => before?.get(keys[i]!) !== lines[i]);
    // Added or different, then removed: what the main thread's directory places again.
    let changed: string[] | null = null;
    if (before !== null) {
      changed = ids.filter((_, i) => differs[i]);
      const now = new Set(keys);
      for (const key of before.keys()) if (!now.has(key)) changed.push(JSON.parse(key) as string);
    }
    port.postMessage({ type: 'head', config: rest, base: before !== null });
    await sendTenants(tenants, ids, (i) => differs[i]!);
    port.postMessage({ type: 'done', changed, texts: shareLines(lines) });
  } catch (err) {
    port.postMessage({ type: 'error', problems: err instanceof ConfigError ? err.problems : null, message: String((err as Error)?.stack ?? err) });
  }
});
