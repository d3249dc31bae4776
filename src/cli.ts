#!/usr/bin/env node
/**
 * Command line entry: `queen-edge [--config PATH] [--port N]` runs the gateway, in one process or as
 * a cluster (src/supervisor.ts); `queen-edge tenants|usage ...` calls the admin API
 * (src/admin/cli-commands.ts); `--help` prints the usage, `--version` the version. The only place
 * that exits the process.
 */
import cluster from 'node:cluster';
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ADMIN_GROUPS, adminUsage } from './admin/cli-commands.js';
import { ConfigError, loadConfigFile } from './config/load.js';
import { compileTables } from './tables.js';
import type { RawConfig } from './config/schema.js';

/** Exit code for a bad command line or an invalid configuration. */
const EXIT_USAGE = 2;

const USAGE = `usage: queen-edge [--config PATH] [--port N]   run the gateway
       queen-edge --help | --version

  -c, --config PATH  YAML configuration (default: $QUEEN_EDGE_CONFIG, else config/default.yaml)
  -p, --port N       HTTPS port, overriding server.https.port (0 = any free port)

Admin commands (against a running gateway's admin listener):
${adminUsage().replace(/^usage:\n/, '')}
Signals: SIGTERM or SIGINT drains (server.drainTimeoutMs), a second one exits at once; SIGHUP
reloads tenants, plans, routes and CORS from the file (an invalid file keeps the running config).
Exit codes: 0 drained cleanly, 1 failure or interrupted drain, 2 bad arguments or configuration.
`;

const OPTIONS = {
  config: { type: 'string', short: 'c' },
  port: { type: 'string', short: 'p' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
} as const;

/** The gateway's command line: config path (flag, else QUEEN_EDGE_CONFIG, else the default) and port override. */
function gatewayArgs(argv: string[], env: NodeJS.ProcessEnv): { help: boolean; version: boolean; configPath: string; port: number | null } {
  const { values } = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: false });
  let port: number | null = null;
  if (values.port !== undefined) {
    port = /^\d{1,5}$/.test(values.port) ? Number(values.port) : NaN;
    if (!(port >= 0 && port <= 65535)) throw new Error(`--port must be a port number (0-65535), not "${values.port}"`);
  }
  return {
    help: values.help === true,
    version: values.version === true,
    configPath: resolve(values.config || env.QUEEN_EDGE_CONFIG || 'config/default.yaml'),
    port,
  };
}

async function version(): Promise<string> {
  // src/cli.ts and dist/cli.js both sit one level below package.json.
  const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

async function main(argv: string[]): Promise<number> {
  // Loaded only to serve: --help and a bad config answer without importing the whole gateway.
  const serving = () => import('./supervisor.js');
  // Workers are forked with the primary's argv; their config arrives from the primary.
  if (cluster.isWorker) return (await serving()).runWorker();
  if (argv[0] !== undefined && ADMIN_GROUPS.has(argv[0])) {
    const { runAdminCli } = await import('./admin/cli-commands.js');
    return runAdminCli(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env });
  }
  let args;
  try {
    args = gatewayArgs(argv, process.env);
  } catch (err) {
    process.stderr.write(`queen-edge: ${(err as Error).message}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  if (args.version) {
    process.stdout.write(`queen-edge ${await version()}\n`);
    return 0;
  }
  let config;
  try {
    config = await loadConfigFile(args.configPath);
    // The directory's rules (ids, hosts, shared brokers) are configuration problems too: exit 2, no stack.
    compileTables(config);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`queen-edge: ${args.configPath}: ${err.message}\n`);
    return EXIT_USAGE;
  }
  const { processLogger } = await import('./observability/log.js');
  const { runInProcess, runPrimary, workerCount } = await serving();
  const log = processLogger(config.log);
  const workers = workerCount(config, availableParallelism());
  const port = args.port;
  const withPort = (c: RawConfig): RawConfig => (port === null ? c : { ...c, server: { ...c.server, https: { ...c.server.https, port } } });
  const reread = async () => withPort(await loadConfigFile(args.configPath));
  config = withPort(config);
  return workers === 1 ? runInProcess(config, { log, reread }) : runPrimary(config, workers, { log, reread });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`queen-edge: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
