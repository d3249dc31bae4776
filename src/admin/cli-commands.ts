/**
 * `queen-edge tenants ...` and `queen-edge usage ...` (issue 5 §3): admin API calls over HTTP,
 * a table for people and `--json` for scripts. Exit codes: 0 done, 1 the call failed (refused,
 * unreachable), 2 the command line was wrong.
 */
import { readFile } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { request, type Dispatcher } from 'undici';

/** Where the commands read their streams and environment. */
export interface CliIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

const USAGE = `usage:
  queen-edge tenants list
  queen-edge tenants get ID
  queen-edge tenants put ID --file FILE.json
  queen-edge tenants suspend ID
  queen-edge tenants resume ID
  queen-edge usage TENANT [--month YYYY-MM]
  queen-edge usage export [--from ISO] [--to ISO] [--granularity hour|day] [--format csv|jsonl] [--tenant ID]
options: --url URL (default $QUEEN_EDGE_ADMIN_URL or http://127.0.0.1:9090)
         --token TOKEN (default $QUEEN_EDGE_ADMIN_TOKEN)  --json
`;

class UsageError extends Error {}

interface Parsed {
  positional: string[];
  flags: Map<string, string | true>;
}

const VALUE_FLAGS = new Set(['url', 'token', 'file', 'month', 'from', 'to', 'granularity', 'format', 'tenant']);
const BOOL_FLAGS = new Set(['json']);

function parseArgs(argv: readonly string[]): Parsed {
  const positional: string[] = [];
  const flags = new Map<string, string | true>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    if (BOOL_FLAGS.has(name) && eq === -1) flags.set(name, true);
    else if (VALUE_FLAGS.has(name)) {
      const value = eq !== -1 ? arg.slice(eq + 1) : argv[++i];
      if (value === undefined || value === '') throw new UsageError(`--${name} needs a value`);
      flags.set(name, value);
    } else throw new UsageError(`unknown option ${arg}`);
  }
  return { positional, flags };
}

/** A table with left-aligned columns. */
function table(headers: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join('  ').trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

/** `YYYY-MM` → [first instant, first instant of the next month) as ISO strings. */
function monthRange(month: string): [string, string] {
  const m = /^(\d{4})-(0[1-9]|1[0-2])$/.exec(month);
  if (!m) throw new UsageError('--month must be YYYY-MM');
  const y = Number(m[1]);
  const mo = Number(m[2]) - 1;
  return [new Date(Date.UTC(y, mo, 1)).toISOString(), new Date(Date.UTC(y, mo + 1, 1)).toISOString()];
}

type Json = any;

/** Runs one admin command; resolves to the process exit code. */
export async function runAdminCli(argv: string[], io: CliIo): Promise<number> {
  const out = (s: string) => io.stdout.write(s);
  let args: Parsed;
  try {
    args = parseArgs(argv);
  } catch (err) {
    io.stderr.write(`queen-edge: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const base = String(args.flags.get('url') ?? io.env.QUEEN_EDGE_ADMIN_URL ?? 'http://127.0.0.1:9090').replace(/\/+$/, '');
  const tokenFlag = args.flags.get('token');
  const token = typeof tokenFlag === 'string' ? tokenFlag : io.env.QUEEN_EDGE_ADMIN_TOKEN;
  const asJson = args.flags.get('json') === true;

  const call = async (method: 'GET' | 'PUT' | 'POST', path: string, body?: string) => {
    const headers: Record<string, string> = {};
    if (token) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    return request(`${base}${path}`, { method, headers, body });
  };
  /** The reply's JSON document; throws the admin API's refusal. */
  const reply = async (res: Dispatcher.ResponseData): Promise<Json> => {
    const text = await res.body.text();
    let doc: Json;
    try {
      doc = text === '' ? null : JSON.parse(text);
    } catch {
      doc = null;
    }
    if (res.statusCode >= 300) {
      const problems = Array.isArray(doc?.problems) ? doc.problems.map((p: string) => `\n  ${p}`).join('') : '';
      throw new Error(`${res.statusCode} ${doc?.code ?? ''}: ${doc?.error ?? text}${problems}`);
    }
    return doc;
  };
  const api = async (method: 'GET' | 'PUT' | 'POST', path: string, body?: string): Promise<Json> => reply(await call(method, path, body));
  const id = (i: number, what: string): string => {
    const v = args.positional[i];
    if (!v) throw new UsageError(`missing ${what}`);
    return encodeURIComponent(v);
  };

  try {
    const [command, sub] = args.positional;
    let doc: Json;
    let human: () => string;
    if (command === 'usage' && sub === 'export') {
      // Streamed straight to stdout: an export can be far larger than memory.
      const q = new URLSearchParams();
      for (const name of ['from', 'to', 'granularity', 'format', 'tenant']) if (typeof args.flags.get(name) === 'string') q.set(name, args.flags.get(name) as string);
      const res = await call('GET', `/admin/v1/usage/export?${q}`);
      if (res.statusCode !== 200) await reply(res);
      else await pipeline(res.body, io.stdout);
      return 0;
    }
    if (command === 'tenants' && sub === 'list') {
      doc = await api('GET', '/admin/v1/tenants');
      human = () => table(['ID', 'STATUS', 'PLAN', 'HOSTS', 'BROKERS'], doc.tenants.map((t: Json) => [t.id, t.status, t.plan, t.hosts.join(',') || '-', String(t.brokers.length)]));
    } else if (command === 'tenants' && sub === 'get') {
      doc = await api('GET', `/admin/v1/tenants/${id(2, 'tenant id')}`);
      human = () =>
        table(['FIELD', 'VALUE'], [
          ['id', doc.id],
          ['status', doc.status],
          ['plan', doc.plan],
          ['hosts', doc.hosts.join(', ') || '-'],
          ['brokers', doc.brokers.join(', ')],
          ['cors origins', doc.cors.origins.join(', ') || '-'],
          ['limit overrides', Object.keys(doc.limits).length ? JSON.stringify(doc.limits) : '-'],
          ['storage used', doc.storage.usedBytes === null ? 'unknown' : `${doc.storage.usedBytes} bytes${doc.storage.blocked ? ' (blocked)' : ''}`],
        ]);
    } else if (command === 'tenants' && sub === 'put') {
      const tenant = id(2, 'tenant id');
      const file = args.flags.get('file');
      if (typeof file !== 'string') throw new UsageError('tenants put needs --file FILE.json');
      doc = await api('PUT', `/admin/v1/tenants/${tenant}`, await readFile(file, 'utf8'));
      human = () => `tenant ${doc.id} saved (${doc.status}, plan ${doc.plan})\n`;
    } else if (command === 'tenants' && (sub === 'suspend' || sub === 'resume')) {
      doc = await api('POST', `/admin/v1/tenants/${id(2, 'tenant id')}/${sub}`);
      human = () => `tenant ${doc.id} ${doc.status}\n`;
    } else if (command === 'usage') {
      const tenant = id(1, 'tenant id');
      const month = args.flags.get('month');
      const range = typeof month === 'string' ? monthRange(month) : null;
      const q = new URLSearchParams({ granularity: 'day', ...(range ? { from: range[0], to: range[1] } : {}) });
      doc = await api('GET', `/admin/v1/tenants/${tenant}/usage?${q}`);
      const row = (label: string, c: Json) => [
        label,
        String(c.requests),
        String(c.messagesPushed),
        String(c.messagesDelivered),
        String(c.acks),
        String(c.ingressBytes),
        String(c.egressBytes),
        Object.entries(c.refusals).map(([k, v]) => `${k}=${v}`).join(',') || '-',
      ];
      human = () =>
        table(['DAY', 'REQUESTS', 'PUSHED', 'DELIVERED', 'ACKS', 'INGRESS_B', 'EGRESS_B', 'REFUSALS'], [...doc.buckets.map((b: Json) => row(b.start.slice(0, 10), b)), row('total', doc.total)]);
    } else {
      throw new UsageError(command ? `unknown command: ${args.positional.join(' ')}` : 'missing command');
    }
    out(asJson ? `${JSON.stringify(doc, null, 2)}\n` : human());
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`queen-edge: ${err.message}\n${USAGE}`);
      return 2;
    }
    io.stderr.write(`queen-edge: ${(err as Error).message}\n`);
    return 1;
  }
}
