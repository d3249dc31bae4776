/**
 * Signals reach the edge however it was started: a SIGHUP while it is still starting is held and
 * reloads once it is ready (never fatal), and `npm start`'s script execs the edge, so the SIGTERM
 * npm forwards drains the edge itself rather than killing a shell in between.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { testConfig } from '../helpers/edge.js';
import { waitForEvent } from '../helpers/wait.js';
import { edgeTracker, type LogLine } from './edge-process.js';

const ROOT = resolve(import.meta.dirname, '../..');
const edges = edgeTracker();
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  await edges.cleanup();
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A TCP server that accepts connections and never answers: a Redis the edge waits for (2 s) while starting. */
async function silentServer(): Promise<{ server: Server; port: number }> {
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await waitForEvent(server, 'listening', 5000);
  cleanups.push(
    () =>
      new Promise<void>((done) => {
        server.close(() => done());
        for (const s of sockets) s.destroy();
      }),
  );
  return { server, port: (server.address() as { port: number }).port };
}

// Each test starts the CLI under tsx: seconds on a loaded machine.
describe('signals', { timeout: 60_000 }, () => {
  it('a SIGHUP while the edge is starting is held, not fatal, and reloads once the edge is ready', async () => {
    const redis = await silentServer();
    const connected = waitForEvent(redis.server, 'connection', 40_000, "the edge's connection to Redis");
    const config = testConfig(['http://127.0.0.1:1'], { server: { workers: 1 }, log: { level: 'info' }, redis: { url: `redis://127.0.0.1:${redis.port}` } });
    const edge = await edges.start(config);
    // The edge is inside its start: waiting for Redis to answer, before any listener is bound.
    await connected;
    edge.child.kill('SIGHUP');
    await edge.waitForLog((l) => l.msg === 'queen-edge listening', 40_000);
    await edge.waitForLog((l) => l.msg === 'SIGHUP received while starting: reloading now', 20_000);
    await edge.waitForLog((l) => String(l.msg).startsWith('configuration reloaded'), 20_000);
    expect(edge.child.exitCode).toBeNull();
    expect(edge.child.signalCode).toBeNull();
  });

  it('`npm start` execs the edge: the SIGTERM npm forwards drains it and npm exits with it', async () => {
    // A package with this repository's start script, whose dist/cli.js is the CLI from source (no build needed).
    const pkg = await mkdtemp(join(tmpdir(), 'qe-npm-start-'));
    cleanups.push(() => rm(pkg, { recursive: true, force: true }));
    const { scripts } = JSON.parse(await readFile(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
    await writeFile(join(pkg, 'package.json'), JSON.stringify({ name: 'qe-start', type: 'module', scripts: { start: scripts.start } }));
    await mkdir(join(pkg, 'dist'));
    await writeFile(join(pkg, 'dist/cli.js'), `await import(${JSON.stringify(pathToFileURL(join(ROOT, 'src/cli.ts')).href)});\n`);
    const file = join(pkg, 'edge.yaml');
    await writeFile(file, stringify(testConfig(['http://127.0.0.1:1'], { server: { workers: 1 }, log: { level: 'info' } })));

    const npm = spawn('npm', ['start', '--silent', '--', '--config', file], {
      cwd: pkg,
      env: { ...process.env, QUEEN_EDGE_CONFIG: '', NODE_OPTIONS: `--import ${import.meta.resolve('tsx')}` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((done) => npm.once('exit', (code) => done(code)));
    const lines: LogLine[] = [];
    let partial = '';
    npm.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      const parts = (partial + chunk).split('\n');
      partial = parts.pop()!;
      for (const text of parts) if (text.startsWith('{')) lines.push(JSON.parse(text) as LogLine);
    });
    const line = (msg: string) =>
      new Promise<LogLine>((done, fail) => {
        const timer = setInterval(() => {
          const found = lines.find((l) => l.msg === msg);
          if (found) {
            clearInterval(timer);
            clearTimeout(limit);
            done(found);
          }
        }, 20);
        const limit = setTimeout(() => {
          clearInterval(timer);
          fail(new Error(`no "${msg}" line; last lines: ${JSON.stringify(lines.slice(-3))}`));
        }, 40_000);
      });
    const listening = await line('queen-edge listening');
    // Whatever happens, the edge this test started does not outlive it.
    cleanups.push(() => {
      for (const pid of [npm.pid!, listening.pid!]) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
    });
    npm.kill('SIGTERM');
    await line('drained');
    expect(await exited).toBe(0);
  });
});
