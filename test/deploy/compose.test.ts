/**
 * docker-compose.yml: `docker compose config` (no daemon needed) accepts it and resolves it as
 * documented, and the stack it describes works without Docker: the image's config with the
 * environment compose gives the edge, in front of the development broker behind the same relay
 * the `dev` profile's container runs.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startRelayedDevBroker, type RelayedDevBroker } from '../../scripts/container-dev-broker.js';
import { parseConfig } from '../../src/config/load.js';
import { call, startEdge, token, type EdgeHarness } from '../helpers/edge.js';

const ROOT = resolve(import.meta.dirname, '../..');
const run = promisify(execFile);
const SECRET = 'compose-test-secret-0123456789abcdef';

/** `docker compose` (the v2 plugin) when the CLI has it, else Debian's `docker-compose`. */
async function composeCommand(): Promise<string[]> {
  try {
    await run('docker', ['compose', 'version'], { cwd: ROOT });
    return ['docker', 'compose'];
  } catch {
    return ['docker-compose'];
  }
}

async function compose(args: string[], env: Record<string, string>): Promise<string> {
  const [cmd, ...pre] = await composeCommand();
  // Only what a person's shell would pass: PATH, HOME and the given variables (no QUEEN_EDGE_* leaking in).
  const { stdout } = await run(cmd!, [...pre, '-f', join(ROOT, 'docker-compose.yml'), ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/root', ...env },
  });
  return stdout;
}

interface Service {
  profiles?: string[];
  build?: { target?: string };
  environment?: Record<string, string>;
  ports?: (string | { published: number | string; target: number; host_ip?: string })[];
  networks?: Record<string, { aliases?: string[] } | null>;
}

// Each `docker compose config` is a Python or Go start: about a second on a loaded machine.
describe('docker-compose.yml', { timeout: 20_000 }, () => {
  let services: Record<string, Service>;
  beforeAll(async () => {
    services = (parse(await compose(['--profile', 'dev', '--profile', 'queen', 'config'], { JWT_SECRET: SECRET })) as { services: Record<string, Service> })
      .services;
  });

  it('refuses to start without JWT_SECRET, naming it', async () => {
    const err = await compose(['config', '-q'], {}).then(
      () => null,
      (e: { stderr?: string }) => e,
    );
    expect(err?.stderr).toMatch(/JWT_SECRET/);
  });

  it('gives the edge its durable store: PostgreSQL in every profile, on a volume, started before the edge', () => {
    const store = new URL(services.edge!.environment!.QUEEN_EDGE_STORE_URL!);
    expect(store.protocol).toBe('postgres:');
    expect(store.hostname).toBe('postgres');
    const pg = services.postgres as Service & { volumes?: ({ source?: string; target: string } | string)[] };
    expect(pg.volumes?.map((v) => (typeof v === 'string' ? v : `${v.source}:${v.target}`)).join(' ')).toMatch(/\bpostgres-data:\/var\/lib\/postgresql\/data\b/);
    const dependsOn = (services.edge as Service & { depends_on?: Record<string, { condition: string }> }).depends_on;
    expect(dependsOn?.postgres?.condition).toBe('service_healthy');
  });

  it('has the edge, Redis and PostgreSQL in every profile, the development broker in `dev`, Queen in `queen`', () => {
    const profiles = Object.fromEntries(Object.entries(services).map(([name, s]) => [name, s.profiles ?? []]));
    expect(profiles).toEqual({ edge: [], redis: [], 'dev-broker': ['dev'], queen: ['queen'], postgres: [] });
  });

  it('both brokers answer as `broker`, the name the edge is given, and build targets are Dockerfile stages', () => {
    for (const name of ['dev-broker', 'queen']) expect(services[name]!.networks?.default?.aliases, name).toContain('broker');
    expect(new URL(services.edge!.environment!.QUEEN_EDGE_BROKER_URL!).hostname).toBe('broker');
    const stages = [...readFileSync(join(ROOT, 'Dockerfile'), 'utf8').matchAll(/^FROM \S+ AS (\S+)$/gm)].map((m) => m[1]);
    expect(services.edge!.build?.target).toBe('runtime');
    expect(stages).toContain(services['dev-broker']!.build?.target);
  });

  it('publishes HTTPS, and the admin listener on the host loopback only', () => {
    const ports = services.edge!.ports!.map((p) => (typeof p === 'string' ? p : `${p.host_ip ?? ''}:${p.published}:${p.target}`));
    expect(ports).toHaveLength(2);
    expect(ports.find((p) => p.endsWith(':9090') || p.includes(':9090/'))).toMatch(/^127\.0\.0\.1:9090:9090/);
    expect(ports.find((p) => /:8443(\/tcp)?$/.test(p))).toBeDefined();
    for (const [name, s] of Object.entries(services)) if (name !== 'edge') expect(s.ports, name).toBeUndefined();
  });

  it("sizes Queen's PostgreSQL pools to fit the server's max_connections, superuser slots aside", () => {
    const env = services.queen!.environment!;
    // Queen's own defaults when unset (server/include/queen/config.hpp in queen-mq/queen).
    const pools = Number(env.DB_POOL_SIZE ?? 150) + Number(env.SIDECAR_POOL_SIZE ?? 50);
    expect(pools).toBeGreaterThan(0);
    // PostgreSQL's default, unless the service's command sets it.
    const command = ((services.postgres as Service & { command?: string[] }).command ?? []).join(' ');
    const maxConnections = Number(/max_connections=(\d+)/.exec(command)?.[1] ?? 100);
    const SUPERUSER_RESERVED = 3;
    expect(pools).toBeLessThanOrEqual(maxConnections - SUPERUSER_RESERVED);
  });

  describe('the `dev` stack without Docker', () => {
    let broker: RelayedDevBroker;
    let edge: EdgeHarness;
    beforeAll(async () => {
      broker = await startRelayedDevBroker(0, '127.0.0.1');
      // The edge's environment as compose resolves it; the names `broker`, `redis` and `postgres` only
      // resolve inside the compose network, so the relay's address stands in for the first and memory for the others.
      const env = {
        ...services.edge!.environment!,
        QUEEN_EDGE_BROKER_URL: `http://127.0.0.1:${broker.port}`,
        QUEEN_EDGE_REDIS_URL: '',
        QUEEN_EDGE_STORE_URL: '',
      };
      const raw = parse(readFileSync(join(ROOT, 'config/docker.yaml'), 'utf8')) as {
        server: Record<string, { host: string; port: number | null }>;
        log: { level: string };
      };
      for (const l of ['https', 'admin'] as const) raw.server[l] = { ...raw.server[l]!, host: '127.0.0.1', port: 0 };
      raw.log.level = 'silent';
      edge = await startEdge(parseConfig(raw, env));
    });
    afterAll(async () => {
      await edge?.close();
      await broker?.close();
    });

    it('is Ready, and a push and a pop with a token signed with JWT_SECRET go through the relay', async () => {
      const ready = await call(edge, 'GET', '/readyz', { base: edge.adminUrl, host: '127.0.0.1' });
      expect(ready.status, ready.text).toBe(200);
      const jwt = await token({ roles: ['read-write'], tenant: 'default' }, SECRET);
      const pushed = await call(edge, 'POST', '/api/v1/push', {
        host: 'localhost',
        token: jwt,
        body: { items: [{ queue: 'compose', payload: { n: 1 }, transactionId: 'c-1' }] },
      });
      expect(pushed.status, pushed.text).toBe(201);
      expect(pushed.json).toEqual([expect.objectContaining({ status: 'queued', transaction_id: 'c-1' })]);
      const popped = await call(edge, 'GET', '/api/v1/pop/queue/compose?batch=1', { host: 'localhost', token: jwt });
      expect(popped.status, popped.text).toBe(200);
      expect(popped.json).toMatchObject({ messages: [{ transactionId: 'c-1', data: { n: 1 } }] });
    });
  });
});
