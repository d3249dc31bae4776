#!/usr/bin/env node
/**
 * Command line entry: `queen-edge [--config PATH]` (or QUEEN_EDGE_CONFIG). The only place that
 * exits the process.
 */
import { resolve } from 'node:path';
import { ConfigError, loadConfigFile } from './config/load.js';
import { startApp } from './app.js';

function configPath(argv: readonly string[]): string {
  const i = argv.indexOf('--config');
  if (i !== -1 && argv[i + 1]) return resolve(argv[i + 1]!);
  const eq = argv.find((a) => a.startsWith('--config='));
  if (eq) return resolve(eq.slice('--config='.length));
  return resolve(process.env.QUEEN_EDGE_CONFIG ?? 'config/default.yaml');
}

async function main(): Promise<void> {
  const path = configPath(process.argv.slice(2));
  let config;
  try {
    config = await loadConfigFile(path);
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`queen-edge: ${path}: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  const app = await startApp(config);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      app.log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    app.log.info({ signal }, 'draining');
    app.close().then(
      () => process.exit(0),
      (err: unknown) => {
        app.log.error({ err }, 'error while draining');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((err: unknown) => {
  process.stderr.write(`queen-edge: ${(err as Error)?.stack ?? String(err)}\n`);
  process.exit(1);
});
