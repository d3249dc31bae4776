#!/usr/bin/env node
/**
 * Command line entry: `queen-edge [--config PATH]` (or QUEEN_EDGE_CONFIG) runs the gateway, in one
 * process or as a cluster (src/supervisor.ts); `queen-edge tenants|usage ...` calls the admin API
 * (src/admin/cli-commands.ts); `--help` prints the usage. The only place that exits the process.
 */
import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { ConfigError, loadConfigFile } from './config/load.js';

/** Exit code for a bad command line or an invalid configuration. */
const EXIT_USAGE = 2;

const USAGE = `usage: queen-edge [--config PATH]   run the gateway
       queen-edge tenants ...       list, get, put, suspend, resume tenants (admin API)
       queen-edge usage TENANT      a tenant's metered usage (admin API)
       queen-edge --help            print this help

  --config PATH   YAML configuration (default: $QUEEN_EDGE_CONFIG, else config/default.yaml)

Signals: SIGTERM or SIGINT drains (server.drainTimeoutMs), a second one exits at once.
Exit codes: 0 drained cleanly, 1 failure or interrupted drain, 2 bad arguments or configuration.
`;

/** First words that select an admin command instead of the gateway. */
const ADMIN_COMMANDS = new Set(['tenants', 'usage']);

/** The config path from `--config PATH`, `--config=PATH`, QUEEN_EDGE_CONFIG or the default; null when argv holds anything else. */
function configPath(argv: readonly string[], env: NodeJS.ProcessEnv): string | null {
  if (argv.length === 0) return resolve(env.QUEEN_EDGE_CONFIG ?? 'config/default.yaml');
  if (argv.length === 2 && argv[0] === '--config' && argv[1]) return resolve(argv[1]);
  if (argv.length === 1 && argv[0]!.startsWith('--config=') && argv[0]!.length > '--config='.length) return resolve(argv[0]!.slice('--config='.length));
  return null;
}

async function main(argv: readonly string[]): Promise<number> {
  // Loaded only to serve: --help and a bad config answer without importing the whole gateway.
  const serving = () => import('./supervisor.js');
  // Workers are forked with the primary's argv; their config arrives from the primary.
  if (cluster.isWorker) return (await serving()).runWorker();
  if (argv[0] !== undefined && ADMIN_COMMANDS.has(argv[0])) {
    const { runAdminCli } = await import('./admin/cli-commands.js');
    return runAdminCli([...argv], { stdout: process.stdout, stderr: process.stderr, env: process.env });
  }
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(USAGE);
    return 0;
  }
  const path = configPath(argv, process.env);
  if (path === null) {
    process.stderr.write(`queen-edge: unexpected arguments: ${argv.join(' ')}\n\n${USAGE}`);
    return EXIT_USAGE;
  }
  let config;
  try {
    config = await loadConfigFile(path);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`queen-edge: ${path}: ${err.message}\n`);
    return EXIT_USAGE;
  }
  const { createLogger } = await import('./observability/log.js');
  const { runInProcess, runPrimary, workerCount } = await serving();
  const log = createLogger(config.log.level);
  const workers = workerCount(config, availableParallelism());
  return workers === 1 ? runInProcess(config, { log }) : runPrimary(config, workers, { log });
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`queen-edge: ${(err as Error)?.stack ?? String(err)}\n`);
    process.exit(1);
  },
);
