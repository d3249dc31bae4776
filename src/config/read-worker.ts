/**
 * Reads, substitutes and validates configuration files off the main thread (loadConfigFileOffThread),
 * and hands each result back in parts: the tenant ids in chunks, each its own message, so the main
 * thread's event loop serves requests between the chunks it takes in. The worker stays for the
 * next reload: a worker's exit blocks the main thread while its heap is freed (about a second
 * after reading 100,000 tenants).
 *
 * It also keeps each tenant of the read it last sent as JSON text: the next read sends only the
 * tenants that differ from it, and the main thread takes the others from the map it built then.
 * Copying 100,000 tenants into the main thread's heap costs it more than a second of work and
 * collections of tens of milliseconds; a reload that changes one tenant now copies one.
 */
import { readlinkSync } from 'node:fs';
import { constants, setPriority } from 'node:os';
import { parentPort } from 'node:worker_threads';
import { ConfigError, loadConfigFile } from './load.js';
import type { RawConfig } from './schema.js';

/** Tenants per message at most: copying them in takes the main thread about a millisecond. */
const CHUNK_TENANTS = 500;
/** Ids per message at most: a tenant the main thread already holds costs it one insertion. */
const CHUNK_IDS = 4000;

/** A read asked for: `seq` numbers it; `base` is the read the main thread holds, which this one may be sent against. */
export interface ReadRequest {
  readonly type: 'read';
  readonly path: string;
  readonly env: NodeJS.ProcessEnv;
  readonly seq: number;
  readonly base: number | null;
}

/** The read last sent: its number and each tenant's JSON text. */
let last: { seq: number; texts: Map<string, string> } | null = null;

/**
 * Lowers this thread's priority once the start's read is done: a reload's parse (seconds of CPU at
 * 100,000 tenants) then gives way to the thread serving requests when the machine is busy. Linux
 * names a thread by its id (/proc/thread-self); elsewhere, or where refused, it stays as it is.
 */
let lowered = false;
function giveWay(): void {
  if (lowered) return;
  lowered = true;
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').pop()), constants.priority.PRIORITY_BELOW_NORMAL);
  } catch {
    // Not Linux, or not allowed: the reader shares the CPU evenly.
  }
}

const port = parentPort!;
/** Resolves when the main thread asks for the next chunk: messages waiting in a port are all copied in one turn of its event loop, so they are sent one at a time. */
let next: (() => void) | null = null;
const asked = (): Promise<void> =>
  new Promise((resolve) => {
    next = resolve;
  });

/** Sends `ids` in order, with the tenants the main thread lacks (`send`), one chunk per request for more. */
async function sendTenants(tenants: RawConfig['tenants'], ids: readonly string[], send: (id: string) => boolean): Promise<void> {
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
  for (const id of ids) {
    chunk.push(id);
    if (send(id)) {
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
  const { path, env, seq, base } = m;
  try {
    const { tenants, ...rest } = await loadConfigFile(path, env);
    const ids = Object.keys(tenants);
    const texts = new Map<string, string>();
    for (const id of ids) texts.set(id, JSON.stringify(tenants[id]));
    const prior = last !== null && last.seq === base ? last.texts : null;
    // Added or different, then removed: what the main thread's directory places again.
    const changed = prior === null ? null : ids.filter((id) => prior.get(id) !== texts.get(id));
    if (prior !== null) for (const id of prior.keys()) if (!texts.has(id)) changed!.push(id);
    port.postMessage({ type: 'head', config: rest, base: prior === null ? null : base });
    await sendTenants(tenants, ids, (id) => prior === null || prior.get(id) !== texts.get(id));
    last = { seq, texts };
    port.postMessage({ type: 'done', changed });
    giveWay();
  } catch (err) {
    port.postMessage({ type: 'error', problems: err instanceof ConfigError ? err.problems : null, message: String((err as Error)?.stack ?? err) });
  }
});
