/**
 * A configuration with N tenants, as a SaaS operator would run the edge: tenants spread over four
 * tenancy-aware brokers, two plans, a host each, a few with CORS origins of their own, a few with
 * their own identity provider, and tenant `steady` (host `steady.many`) for a steady client.
 *
 *   tsx bench/many-tenants-config.ts N [out.json|out.yaml] [--brokers URL,URL,...] [--redis URL]
 *
 * The output's format follows its extension; without a file the JSON goes to stdout.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';

export const STEADY_TENANT = 'steady';
export const STEADY_HOST = 'steady.many';
export const MANY_SECRET = 'queen-edge-many-tenants-secret-0123456789';

export interface ManyTenantsInput {
  readonly tenants: number;
  readonly brokers?: readonly string[];
  readonly redisUrl?: string | null;
  readonly keyPrefix?: string;
  readonly httpsPort?: number;
  readonly adminPort?: number;
  readonly adminToken?: string;
}

const plan = (rps: number): Record<string, unknown> => ({
  features: ['streams'],
  limits: {
    requestsPerSec: rps,
    requestBurst: rps * 2,
    messagesPerSec: rps * 10,
    messageBurst: rps * 20,
    parkedPolls: 20,
    maxPayloadBytes: 1048576,
    maxBatch: 1000,
  },
  quotas: { messagesPerMonth: 1_000_000_000, ingressBytesPerMonth: 1_000_000_000_000 },
  storageBytes: 1_099_511_627_776,
});

/** The id of the i-th generated tenant. */
export const tenantId = (i: number): string => `t${String(i).padStart(6, '0')}`;

/** One generated tenant: every 50th has CORS origins of its own, every 500th its own IdP. */
export function manyTenant(i: number, brokers: readonly string[]): Record<string, unknown> {
  const id = tenantId(i);
  const t: Record<string, unknown> = {
    plan: i % 10 === 0 ? 'pro' : 'free',
    hosts: [`${id}.many`],
    brokers: [brokers[i % brokers.length]],
    tenancyAwareBrokers: true,
  };
  if (i % 50 === 0) t.cors = { origins: [`https://${id}.app.example`] };
  else if (i % 7 === 0) t.cors = { origins: ['https://console.example'] };
  if (i % 500 === 0) t.auth = { secret: `tenant-secret-${id}-0123456789abcdef`, issuer: `https://${id}.idp.example` };
  return t;
}

export function manyTenantsConfig(c: ManyTenantsInput): Record<string, unknown> {
  const brokers = c.brokers ?? ['http://127.0.0.1:16631', 'http://127.0.0.1:16632', 'http://127.0.0.1:16633', 'http://127.0.0.1:16634'];
  const tenants: Record<string, unknown> = {
    [STEADY_TENANT]: { plan: 'pro', hosts: [STEADY_HOST], brokers: [brokers[0]], tenancyAwareBrokers: true },
  };
  for (let i = 0; i < c.tenants; i++) tenants[tenantId(i)] = manyTenant(i, brokers);
  return {
    server: {
      https: { host: '127.0.0.1', port: c.httpsPort ?? 18443 },
      admin: { host: '127.0.0.1', port: c.adminPort ?? 19090, token: c.adminToken ?? 'many-admin-token-0123456789' },
      workers: 1,
    },
    log: { level: 'warn', format: 'json', accessLog: false },
    redis: { url: c.redisUrl ?? null, keyPrefix: c.keyPrefix ?? 'qe-many:', timeoutMs: 1000 },
    auth: { secret: MANY_SECRET },
    plans: { free: plan(50), pro: plan(500) },
    tenants,
  };
}

function main(argv: string[]): void {
  const n = Number(argv[0]);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error('usage: many-tenants-config.ts N [out.json|out.yaml] [--brokers a,b] [--redis URL]');
  const out = argv[1] && !argv[1].startsWith('--') ? argv[1] : null;
  const opt = (name: string): string | undefined => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const brokers = opt('--brokers')?.split(',');
  const config = manyTenantsConfig({ tenants: n, ...(brokers ? { brokers } : {}), redisUrl: opt('--redis') ?? null });
  const text = out?.endsWith('.yaml') || out?.endsWith('.yml') ? stringify(config) : JSON.stringify(config);
  if (out) writeFileSync(out, text);
  else process.stdout.write(text);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main(process.argv.slice(2));
