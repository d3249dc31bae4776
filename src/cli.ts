#!/usr/bin/env node
/**
 * Command line entry: `queen-edge [--config PATH] [--port N] [--admin-port N]` runs the gateway, in
 * one process or as a cluster (src/supervisor.ts); `queen-edge validate` checks a configuration
 * without serving; `queen-edge migrate` copies Redis's records into the durable store
 * (src/admin/migrate.ts); `queen-edge tenants|keys|usage ...` calls the admin API (src/admin/cli-commands.ts);
 * `--help` prints the usage, `--version` the version. The only place that exits the process.
 */
import cluster from 'node:cluster';
import { readFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ADMIN_GROUPS, adminUsage } from './admin/cli-commands.js';
import { describeProblems } from './config/hints.js';
import { ConfigError, keepForReloads, loadConfigFile, loadConfigFileOffThread } from './config/load.js';
import { redactUserInfo } from './net/redact-url.js';
import { compileTablesResolved } from './tables.js';
import type { RawConfig } from './config/schema.js';
import { HeldHangups } from './hangups.js';

/** Exit code for a bad command line or an invalid configuration. */
const EXIT_USAGE = 2;

const USAGE = `usage: queen-edge [--config PATH] [--port N] [--admin-port N]   run the gateway
       queen-edge validate [--config PATH]   check a configuration, exit 0 or 2
       queen-edge migrate [--config PATH]    copy Redis's records into the store
                                             (store.url); safe to run again
       queen-edge --help | --version

  -c, --config PATH   YAML configuration
                      (default: $QUEEN_EDGE_CONFIG, else config/default.yaml)
  -p, --port N        HTTPS port, overriding server.https.port (0: any free one)
      --admin-port N  admin listener port, overriding server.admin.port

Admin commands (against a running gateway's admin listener):
${adminUsage().replace(/^usage:\n/, '')}
Signals: SIGTERM or SIGINT drains (server.drainTimeoutMs), a second one exits at
once; SIGHUP reloads the file: tenants, plans, routes, CORS, the admin token,
certificates, JWT keys and Redis credentials apply, other changed settings are
named as needing a restart; an invalid file keeps the running config. Under
npm start, npm forwards SIGTERM and SIGINT only: send SIGHUP to its child.
Exit codes: 0 drained cleanly, 1 failure or interrupted drain, 2 bad arguments
or configuration.
`;

const OPTIONS = {
  config: { type: 'string', short: 'c' },
  port: { type: 'string', short: 'p' },
  'admin-port': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
} as const;

/** A port flag's value; throws a usage error for anything but 0-65535. */
function portOption(name: string, text: string | undefined): number | null {
  if (text === undefined) return null;
  const port = /^\d{1,5}$/.test(text) ? Number(text) : NaN;
  if (!(port >= 0 && port <= 65535)) throw new Error(`--${name} must be a port number (0-65535), not "${text}"`);
  return port;
}

interface GatewayArgs {
  help: boolean;
  version: boolean;
  /** `validate`: check the configuration and exit. */
  validate: boolean;
  /** `migrate`: copy Redis's records into the store and exit. */
  migrate: boolean;
  configPath: string;
  port: number | null;
  adminPort: number | null;
}

/** The gateway's command line: config path (flag, else QUEEN_EDGE_CONFIG, else the default) and port overrides. */
function gatewayArgs(argv: string[], env: NodeJS.ProcessEnv): GatewayArgs {
  const { values, positionals } = parseArgs({ args: argv, options: OPTIONS, strict: true, allowPositionals: true });
  const validate = positionals[0] === 'validate';
  const migrate = positionals[0] === 'migrate';
  const extra = positionals[validate || migrate ? 1 : 0];
  if (extra !== undefined) throw new Error(`unexpected argument "${extra}"`);
  if ((validate || migrate) && (values.port !== undefined || values['admin-port'] !== undefined)) throw new Error(`${positionals[0]} takes only --config`);
  return {
    help: values.help === true,
    version: values.version === true,
    validate,
    migrate,
    configPath: resolve(values.config || env.QUEEN_EDGE_CONFIG || 'config/default.yaml'),
    port: portOption('port', values.port),
    adminPort: portOption('admin-port', values['admin-port']),
  };
}

/**
 * Loads, validates and compiles the file, then checks the files it names as the start does
 * (src/preflight.ts); throws a ConfigError with every problem. Returns the config and the start's warnings.
 */
async function checkedConfig(path: string, adjust: (c: RawConfig) => RawConfig = (c) => c): Promise<{ config: RawConfig; warnings: string[] }> {
  const config = adjust(await loadConfigFile(path));
  // The directory's rules (ids, hosts, shared brokers, by name and by address) are configuration problems too: exit 2, no stack.
  await compileTablesResolved(config);
  const { checkFiles } = await import('./preflight.js');
  const { problems, warnings } = await checkFiles(config);
  if (problems.length > 0) throw new ConfigError(problems);
  return { config, warnings };
}

/** `queen-edge validate`: every problem of the file and of the files it names, with its path and a hint, and the start's warnings; no listener is opened. */
async function validate(path: string): Promise<number> {
  try {
    const { config, warnings } = await checkedConfig(path);
    for (const w of warnings) process.stderr.write(`queen-edge: warning: ${w}\n`);
    const tenants = Object.keys(config.tenants).length;
    const plans = Object.keys(config.plans).length;
    process.stdout.write(`${path}: valid (${tenants} tenant${tenants === 1 ? '' : 's'}, ${plans} plan${plans === 1 ? '' : 's'})\n`);
    return 0;
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(problemReport(path, err));
    return EXIT_USAGE;
  }
}

/** `queen-edge migrate`: one line per copy step; exit 0, 2 for a configuration without Redis or store, 1 when either cannot be reached. */
async function migrate(path: string): Promise<number> {
  let config: RawConfig;
  try {
    config = await loadConfigFile(path);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(problemReport(path, err));
    return EXIT_USAGE;
  }
  const { migrateToStore, MigrateSetupError } = await import('./admin/migrate.js');
  const { processLogger } = await import('./observability/log.js');
  try {
    for (const r of await migrateToStore(config, processLogger(config.log))) {
      process.stdout.write(`${r.step}: ${r.copied} copied, ${r.same} already in the store, ${r.kept} kept as the store has them\n`);
    }
    return 0;
  } catch (err) {
    process.stderr.write(redactUserInfo(`queen-edge migrate: ${(err as Error).message}\n`));
    return err instanceof MigrateSetupError ? EXIT_USAGE : 1;
  }
}

function problemReport(path: string, err: ConfigError): string {
  const n = err.problems.length;
  return redactUserInfo(`queen-edge: ${path}: ${n} problem${n === 1 ? '' : 's'}\n${describeProblems(err.problems)}`);
}

/** A listener that could not bind: one line (the port, why, and what to do), not a stack. */
function bindFailure(err: unknown): string | null {
  const cause = (err as { cause?: NodeJS.ErrnoException } | null)?.cause;
  if (cause?.syscall !== 'listen') return null;
  const hint = cause.code === 'EADDRINUSE' ? ' (another queen-edge running? choose other ports with --port and --admin-port)' : '';
  return `queen-edge: ${(err as Error).message}${hint}\n`;
}

/** The durable store could not be opened at start: its one-line message, not a stack. */
function startFailure(err: unknown): string | null {
  return (err as Error | null)?.name === 'StoreStartError' ? `queen-edge: ${(err as Error).message}\n` : null;
}

async function version(): Promise<string> {
  // src/cli.ts and dist/cli.js both sit one level below package.json.
  const pkg = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

async function main(argv: string[]): Promise<number> {
  // Loaded only to serve: --help and a bad config answer without importing the whole gateway.
  const serving = () => import('./supervisor.js');
  // Before anything slow: a SIGHUP while starting must not kill the process (src/hangups.ts).
  const hangups = new HeldHangups();
  // Workers are forked with the primary's argv; their config arrives from the primary.
  if (cluster.isWorker) return (await serving()).runWorker();
  if (argv[0] !== undefined && ADMIN_GROUPS.has(argv[0])) {
    const { runAdminCli } = await import('./admin/cli-commands.js');
    return runAdminCli(argv, { stdout: process.stdout, stderr: process.stderr, env: process.env });
  }
  let args: GatewayArgs;
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
  if (args.validate) return validate(args.configPath);
  if (args.migrate) return migrate(args.configPath);
  const { port, adminPort } = args;
  const withPorts = (c: RawConfig): RawConfig => ({
    ...c,
    server: {
      ...c.server,
      https: port === null ? c.server.https : { ...c.server.https, port },
      admin: adminPort === null ? c.server.admin : { ...c.server.admin, port: adminPort },
    },
  });
  let config: RawConfig;
  try {
    config = (await checkedConfig(args.configPath, withPorts)).config;
    // A reload's read is then sent as its changes from this file (config/read-worker.ts).
    keepForReloads(config.tenants);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(problemReport(args.configPath, err));
    return EXIT_USAGE;
  }
  const { processLogger } = await import('./observability/log.js');
  const { replicasWithoutRedis, runInProcess, runPrimary, workerCount } = await serving();
  const log = processLogger(config.log);
  const replicas = replicasWithoutRedis(config, process.env);
  if (replicas !== null) {
    log.error(
      { replicas },
      `QUEEN_EDGE_REPLICAS says ${replicas} instances serve side by side, but no Redis is configured: each keeps its own limits, quotas, usage and admin writes, so together they admit ${replicas} times every quota, and a restart resets them. Set redis.url (or redis.cluster), or run one replica (docs/deploying.md)`,
    );
  }
  const workers = workerCount(config, availableParallelism());
  if (config.server.workers === 0 && workers > 1) {
    log.info({ workers }, `server.workers is 0 and Redis is configured: starting one worker per CPU (${workers}); set server.workers to choose`);
  }
  // Read on a worker thread: a long tenant list would stall every request while it is parsed.
  const reread = async () => withPorts(await loadConfigFileOffThread(args.configPath));
  return workers === 1 ? runInProcess(config, { log, hangups, reread }) : runPrimary(config, workers, { log, hangups, reread });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(redactUserInfo(bindFailure(err) ?? startFailure(err) ?? `queen-edge: ${(err as Error)?.stack ?? String(err)}\n`));
    process.exit(1);
  },
);
