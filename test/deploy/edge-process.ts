/**
 * Runs the real CLI (`node --import tsx src/cli.ts --config <file>`) as a child process, for the
 * tests of the process model: workers, signals, drain, exit codes. Log lines (pino JSON on stdout)
 * are collected so tests can wait for lifecycle events and see which worker served a request.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { stringify } from 'yaml';
import { Agent, request } from 'undici';

const ROOT = resolve(import.meta.dirname, '../..');

/** One parsed pino line. */
export type LogLine = Record<string, unknown> & { msg?: string; pid?: number; worker?: number };

/** A running CLI process. */
export interface EdgeProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly lines: LogLine[];
  readonly stderr: () => string;
  /** Resolves with the first log line matching pred (already seen or future); rejects after timeoutMs. */
  waitForLog(pred: (l: LogLine) => boolean, timeoutMs?: number): Promise<LogLine>;
  /** Resolves when the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGKILLs the process if still running and removes its config file. */
  kill(): Promise<void>;
}

export { freePort } from '../helpers/ports.js';

/** Writes `config` as YAML to a temporary file and starts the CLI on it (or on `args` when given, with `env` added to the environment; in both, `{config}` stands for the file). */
export async function spawnEdge(config: unknown, args?: string[], env: NodeJS.ProcessEnv = {}): Promise<EdgeProcess> {
  const dir = await mkdtemp(join(tmpdir(), 'qe-deploy-'));
  const file = join(dir, 'config.yaml');
  await writeFile(file, stringify(config));
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...(args?.map((a) => a.replace('{config}', file)) ?? ['--config', file])], {
    cwd: ROOT,
    env: { ...process.env, QUEEN_EDGE_CONFIG: '', ...Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v?.replace('{config}', file)])) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: LogLine[] = [];
  const waiters = new Set<{ pred: (l: LogLine) => boolean; done: (l: LogLine) => void }>();
  let partial = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop()!;
    for (const text of parts) {
      let line: LogLine;
      try {
        line = JSON.parse(text) as LogLine;
      } catch {
        line = { msg: text };
      }
      lines.push(line);
      for (const w of waiters) if (w.pred(line)) w.done(line);
    }
  });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    err += chunk;
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => child.once('exit', (code, signal) => done({ code, signal })));
  return {
    child,
    pid: child.pid!,
    lines,
    stderr: () => err,
    exited,
    waitForLog(pred, timeoutMs = 15000) {
      const seen = lines.find(pred);
      if (seen) return Promise.resolve(seen);
      return new Promise((done, fail) => {
        const w = {
          pred,
          done: (l: LogLine) => {
            waiters.delete(w);
            clearTimeout(timer);
            done(l);
          },
        };
        const timer = setTimeout(() => {
          waiters.delete(w);
          fail(new Error(`no matching log line within ${timeoutMs} ms; stderr: ${err}; last lines: ${JSON.stringify(lines.slice(-5))}`));
        }, timeoutMs);
        waiters.add(w);
      });
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * One request on a connection of its own, so the cluster primary's round-robin hands it to the next
 * worker. Bounded (30 s to connect, for the head and between body chunks), so a test whose edge
 * stopped answering fails naming the request instead of waiting out undici's five minutes.
 */
export async function freshRequest(
  url: string,
  opts: { method?: 'GET' | 'POST'; headers?: Record<string, string>; body?: string } = {},
): Promise<{ status: number; text: string }> {
  const agent = new Agent({ connect: { rejectUnauthorized: false, timeout: 30_000 }, headersTimeout: 30_000, bodyTimeout: 30_000 });
  try {
    const res = await request(url, { method: opts.method ?? 'GET', dispatcher: agent, headers: opts.headers, body: opts.body });
    return { status: res.statusCode, text: await res.body.text() };
  } finally {
    await agent.destroy();
  }
}

/** Whether a TCP connection to 127.0.0.1:port is refused. */
export function connectionRefused(port: number): Promise<boolean> {
  return new Promise((done) => {
    const agent = new Agent({ connect: { rejectUnauthorized: false, timeout: 2000 } });
    request(`https://127.0.0.1:${port}/health`, { dispatcher: agent })
      .then(
        async (r) => {
          await r.body.dump();
          done(false);
        },
        (err: NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException }) => done((err.code ?? err.cause?.code) === 'ECONNREFUSED'),
      )
      .finally(() => void agent.destroy());
  });
}

/** Edge processes started by one test file, killed after each test. */
export function edgeTracker(): { start(config: unknown, args?: string[], env?: NodeJS.ProcessEnv): Promise<EdgeProcess>; cleanup(): Promise<void> } {
  const running: EdgeProcess[] = [];
  return {
    async start(config, args, env) {
      const edge = await spawnEdge(config, args, env);
      running.push(edge);
      return edge;
    },
    async cleanup() {
      for (const edge of running.splice(0).reverse()) await edge.kill();
    },
  };
}
