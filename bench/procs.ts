/**
 * Child processes of the benchmark and what /proc says about them: spawning with a raised file
 * limit, free ports, waiting for a listener, and the CPU time and RSS of a process tree.
 */
import { spawn, spawnSync, type ChildProcess, type StdioOptions } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ). */
const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout.trim()) || 100;

/** File descriptors a child may open: 10,000 parked polls need one client and one upstream socket each. */
export const CHILD_NOFILE = 65536;

/** The descriptors a child started by spawnWithLimits gets: CHILD_NOFILE, or the hard limit when that is lower (no CAP_SYS_RESOURCE). */
export function childFileLimit(): number {
  const m = /^Max open files\s+\S+\s+(\S+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
  const hard = m && m[1] !== 'unlimited' ? Number(m[1]) : Number.POSITIVE_INFINITY;
  return Math.min(CHILD_NOFILE, hard);
}

export { freePort } from '../test/helpers/ports.js';

/** Spawns `argv` with RLIMIT_NOFILE raised; `exec` keeps the pid, so /proc figures are the program's. */
export function spawnWithLimits(argv: readonly string[], opts: { stdio: StdioOptions; env?: NodeJS.ProcessEnv; cwd?: string }): ChildProcess {
  const quoted = argv.map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  return spawn('sh', ['-c', `ulimit -n ${CHILD_NOFILE} 2>/dev/null || ulimit -n $(ulimit -Hn); exec ${quoted}`], {
    stdio: opts.stdio,
    env: opts.env ?? process.env,
    cwd: opts.cwd ?? process.cwd(),
  });
}

/** Resolves once something accepts TCP connections on `port`, or rejects after `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs: number, child?: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child && child.exitCode !== null) throw new Error(`process exited with ${child.exitCode} before listening on ${port}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on ${port} after ${timeoutMs} ms`);
    await sleep(50);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

interface StatLine {
  pid: number;
  ppid: number;
  ticks: number;
}

function readStat(pid: number): StatLine | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name is in parentheses and may contain spaces: split after the last ')'.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
  return { pid, ppid: Number(rest[1]), ticks: Number(rest[11]) + Number(rest[12]) };
}

/** The pid and all its live descendants. */
export function processTree(root: number): number[] {
  const byParent = new Map<number, number[]>();
  for (const name of readdirSync('/proc')) {
    const pid = Number(name);
    if (!Number.isInteger(pid)) continue;
    const st = readStat(pid);
    if (!st) continue;
    const list = byParent.get(st.ppid) ?? [];
    list.push(pid);
    byParent.set(st.ppid, list);
  }
  const out: number[] = [];
  const queue = [root];
  while (queue.length > 0) {
    const pid = queue.pop()!;
    out.push(pid);
    queue.push(...(byParent.get(pid) ?? []));
  }
  return out;
}

/** User + system CPU seconds of a process tree (live processes only: read it before they exit). */
export function treeCpuSeconds(root: number): number {
  let ticks = 0;
  for (const pid of processTree(root)) ticks += readStat(pid)?.ticks ?? 0;
  return ticks / CLK_TCK;
}

/** Resident set size of a process tree, bytes (VmRSS). */
export function treeRssBytes(root: number): number {
  let kib = 0;
  for (const pid of processTree(root)) {
    try {
      const m = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) kib += Number(m[1]);
    } catch {
      // The process ended between the scan and the read.
    }
  }
  return kib * 1024;
}

/** Node processes in the tree (the edge's workers show up here when `server.workers` > 1 works). */
export function nodeProcessCount(root: number): number {
  return processTree(root).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'node';
    } catch {
      return false;
    }
  }).length;
}

/** Sends SIGTERM, then SIGKILL after `graceMs`; resolves when the child has exited. */
export function stopChild(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/** The 1-minute load average. */
export function loadAverage(): number {
  return Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
}

/** True when `cmd` is on PATH. */
export function hasCommand(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/** Generates a self-signed ECDSA P-256 certificate for 127.0.0.1/localhost with openssl. */
export async function makeCertificate(dir: string): Promise<{ cert: string; key: string }> {
  const cert = join(dir, 'bench.crt');
  const key = join(dir, 'bench.key');
  const r = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '2',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=IP:127.0.0.1,DNS:localhost',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  if (r.status !== 0) throw new Error(`openssl failed: ${r.stderr.toString()}`);
  return { cert, key };
}
