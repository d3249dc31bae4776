/**
 * `queen-edge tenants|keys|plans|brokers|stats|reloads|usage|maintenance ...`: admin API calls over HTTP, a table for
 * people and `--json` for scripts. Each command is one row of COMMANDS (its words, arguments,
 * options and action), from which the parser and the help are derived: a new command is a new row.
 * Exit codes: 0 done (or help shown), 1 the call failed (refused, unreachable), 2 the command line was wrong.
 */
import { readFile } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { request } from 'undici';
import { mintKey } from '../keys/format.js';

/** Where the commands read their streams and environment. */
export interface CliIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
}

// biome-ignore lint/suspicious/noExplicitAny: the admin API's JSON answers are printed field by field as docs/reference.md shapes them; the CLI does not re-validate them
type Json = any;
type Options = NonNullable<ParseArgsConfig['options']>;

/** What a command's action receives. */
export interface CommandContext {
  /** Positional arguments after the command's words, URL-encoded for use in a path. */
  args: string[];
  values: Readonly<Record<string, unknown>>;
  api(method: 'GET' | 'PUT' | 'POST' | 'DELETE', path: string, body?: string): Promise<Json>;
  /** GETs `path` and streams the answer's body to stdout as it arrives (exports can exceed memory). */
  download(path: string): Promise<void>;
}

/** One admin command. */
export interface AdminCommand {
  /** The words that select it: `['tenants', 'get']`. */
  words: readonly string[];
  /** Names of its required positional arguments, in order (shown in the help). */
  args: readonly string[];
  /** Names of optional positional arguments after the required ones (shown in brackets). */
  optional?: readonly string[];
  /** Its own options, beyond the shared --url, --token, --json and --help. */
  options?: Options;
  /** Options as shown in the help, e.g. `--file FILE.json`. */
  optionsHelp?: string;
  summary: string;
  /**
   * The API's answer and how to show it to a person; null when the command wrote its output
   * itself. `failed`: the answer is shown, but the call failed (exit 1 with this message).
   */
  run(ctx: CommandContext): Promise<{ doc: Json; human(): string; failed?: string } | null>;
}

/** A wrong command line: exit 2 with the usage. */
export class UsageError extends Error {}

/** The admin API refused the call; `doc` is its JSON answer, when it gave one. */
class ApiError extends Error {
  constructor(
    message: string,
    readonly doc: Json,
  ) {
    super(message);
  }
}

/** A table with left-aligned columns. */
function table(headers: readonly string[], rows: ReadonlyArray<readonly string[]>): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join('\n')}\n`;
}

/** Where a tenant field came from, for people. */
function fromText(source: unknown): string {
  return source === 'file' ? 'the config file' : source === 'admin' ? 'an admin API override' : 'unknown';
}

/** A tenant's source column: `file`, `admin API`, or `file + override`. */
function sourceText(source: Json): string {
  if (!source) return '-';
  if (!source.inFile) return 'admin API';
  return source.overridden ? 'file + override' : 'file';
}

/** `YYYY-MM` → [first instant, first instant of the next month) as ISO strings. */
function monthRange(month: string): [string, string] {
  const m = /^(\d{4})-(0[1-9]|1[0-2])$/.exec(month);
  if (!m) throw new UsageError('--month must be YYYY-MM');
  const y = Number(m[1]);
  const mo = Number(m[2]) - 1;
  return [new Date(Date.UTC(y, mo, 1)).toISOString(), new Date(Date.UTC(y, mo + 1, 1)).toISOString()];
}

const usageRow = (label: string, c: Json): string[] => [
  label,
  String(c.requests),
  String(c.messagesPushed),
  String(c.messagesDelivered),
  String(c.acks),
  String(c.ingressBytes),
  String(c.egressBytes),
  Object.entries(c.refusals)
    .map(([k, v]) => `${k}=${v}`)
    .join(',') || '-',
];

/** The options of the listings that page over the tenants (`tenants list`, `brokers`): the admin API's cursor, limit and filters. */
const PAGE_OPTIONS: Options = {
  status: { type: 'string' },
  plan: { type: 'string' },
  prefix: { type: 'string' },
  limit: { type: 'string' },
  cursor: { type: 'string' },
  all: { type: 'boolean' },
};
const PAGE_HELP = '[--status active|suspended] [--plan ID] [--prefix ID-OR-HOST] [--limit N] [--cursor C | --all]';

/**
 * A page of a listing over the tenants, `field` holding its entries; --all follows the cursors and
 * gathers every page's entries here, the edge holding one page at a time.
 */
async function listPages(api: CommandContext['api'], path: string, field: string, values: CommandContext['values']): Promise<Json> {
  const q = new URLSearchParams();
  for (const name of ['status', 'plan', 'prefix', 'limit', 'cursor'] as const) if (typeof values[name] === 'string') q.set(name, values[name]);
  const doc = await api('GET', `${path}?${q}`);
  while (values.all === true && doc.next) {
    q.set('cursor', doc.next);
    const page = await api('GET', `${path}?${q}`);
    doc[field].push(...page[field]);
    doc.next = page.next;
  }
  return doc;
}

/** Under a listing's table: how to get the next page, when there is one. */
const moreText = (doc: Json): string => (doc.next ? `more: --cursor ${doc.next} (or --all)\n` : '');

export const COMMANDS: readonly AdminCommand[] = [
  {
    words: ['tenants', 'list'],
    args: [],
    options: PAGE_OPTIONS,
    optionsHelp: PAGE_HELP,
    summary: 'a page of tenants in id order (--all: every page), filtered',
    async run({ api, values }) {
      const doc = await listPages(api, '/admin/v1/tenants', 'tenants', values);
      return {
        doc,
        human: () =>
          table(
            ['ID', 'STATUS', 'PLAN', 'HOSTS', 'BROKERS', 'SOURCE'],
            doc.tenants.map((t: Json) => [t.id, t.status, t.plan, t.hosts.join(',') || '-', String(t.brokers.length), sourceText(t.source)]),
          ) + moreText(doc),
      };
    },
  },
  {
    words: ['tenants', 'get'],
    args: ['ID'],
    summary: "one tenant's record",
    async run({ api, args: [id] }) {
      const doc = await api('GET', `/admin/v1/tenants/${id}`);
      return {
        doc,
        human: () =>
          table(
            ['FIELD', 'VALUE'],
            [
              ['id', doc.id],
              ['status', `${doc.status} (from ${fromText(doc.source?.status)})`],
              ['record', `from ${fromText(doc.source?.record)}${doc.source?.overridden ? ' (reset to the file: queen-edge tenants reset ID)' : ''}`],
              ['plan', doc.plan],
              ['hosts', doc.hosts.join(', ') || '-'],
              ['brokers', doc.brokers.join(', ')],
              ['cors origins', doc.cors.origins.join(', ') || '-'],
              ['limit overrides', Object.keys(doc.limits).length ? JSON.stringify(doc.limits) : '-'],
              ['storage used', doc.storage.usedBytes === null ? 'unknown' : `${doc.storage.usedBytes} bytes${doc.storage.blocked ? ' (blocked)' : ''}`],
            ],
          ),
      };
    },
  },
  {
    words: ['tenants', 'put'],
    args: ['ID'],
    options: { file: { type: 'string' } },
    optionsHelp: '--file FILE.json',
    summary: 'create or replace a tenant',
    async run({ api, args: [id], values }) {
      if (typeof values.file !== 'string') throw new UsageError('tenants put needs --file FILE.json');
      const doc = await api('PUT', `/admin/v1/tenants/${id}`, await readFile(values.file, 'utf8'));
      return { doc, human: () => `tenant ${doc.id} saved (${doc.status}, plan ${doc.plan})\n` };
    },
  },
  ...(['suspend', 'resume'] as const).map(
    (verb): AdminCommand => ({
      words: ['tenants', verb],
      args: ['ID'],
      summary: verb === 'suspend' ? "refuse the tenant's traffic (403)" : 'serve a suspended tenant again',
      async run({ api, args: [id] }) {
        const doc = await api('POST', `/admin/v1/tenants/${id}/${verb}`);
        return { doc, human: () => `tenant ${doc.id} ${doc.status}\n` };
      },
    }),
  ),
  {
    words: ['tenants', 'delete'],
    args: ['ID'],
    summary: 'remove a tenant: its traffic is refused at once, its usage stays readable (undoing it: docs/managing-tenants.md)',
    async run({ api, args: [id] }) {
      await api('DELETE', `/admin/v1/tenants/${id}`);
      const shownId = decodeURIComponent(id!);
      return { doc: { id: shownId, deleted: true }, human: () => `tenant ${shownId} deleted\n` };
    },
  },
  {
    words: ['tenants', 'reset'],
    args: ['ID'],
    summary: "drop the admin API's overrides (suspend, resume, put) of a tenant of the config file: the file's entry applies again",
    async run({ api, args: [id] }) {
      const doc = await api('DELETE', `/admin/v1/tenants/${id}/overrides`);
      return { doc, human: () => `tenant ${doc.id} reset to the config file (${doc.status}, plan ${doc.plan})\n` };
    },
  },
  {
    words: ['plans'],
    args: [],
    summary: 'every plan: limits, quotas, features, tenants on it',
    async run({ api }) {
      const doc = await api('GET', '/admin/v1/plans');
      return {
        doc,
        human: () =>
          table(
            ['ID', 'REQ/S', 'BURST', 'MSG/S', 'MSG_BURST', 'PARKED', 'MAX_PAYLOAD_B', 'MSG/MONTH', 'FEATURES', 'TENANTS'],
            doc.plans.map((p: Json) => [
              p.id,
              String(p.limits.requestsPerSec),
              String(p.limits.requestBurst),
              String(p.limits.messagesPerSec),
              String(p.limits.messageBurst),
              String(p.limits.parkedPolls),
              String(p.limits.maxPayloadBytes),
              p.quotas.messagesPerMonth === 0 ? 'unlimited' : String(p.quotas.messagesPerMonth),
              p.features.join(',') || '-',
              String(p.tenants),
            ]),
          ) + (doc.writable ? '' : 'read-only: plans come from the config file (no Redis configured)\n'),
      };
    },
  },
  {
    words: ['brokers'],
    args: [],
    options: { ...PAGE_OPTIONS, tenant: { type: 'string' } },
    optionsHelp: `[--tenant ID | ${PAGE_HELP}]`,
    summary: "a page of tenants' brokers, in tenant id order (--all: every page): health, requests in flight, picks, ring share, last health change",
    async run({ api, values }) {
      if (typeof values.tenant === 'string' && Object.keys(PAGE_OPTIONS).some((name) => values[name] !== undefined)) {
        throw new UsageError('brokers: --tenant names one tenant, without paging or filters');
      }
      const doc =
        typeof values.tenant === 'string'
          ? await api('GET', `/admin/v1/brokers?${new URLSearchParams({ tenant: values.tenant })}`)
          : await listPages(api, '/admin/v1/brokers', 'clusters', values);
      const change = (c: Json): string => (c ? `${c.healthy ? 'up' : 'down'} ${new Date(c.at).toISOString()}${c.reason ? ` (${c.reason})` : ''}` : '-');
      return {
        doc,
        human: () =>
          table(
            ['TENANT', 'BROKER', 'HEALTH', 'IN_FLIGHT', 'PICKS', 'SHARE', 'LAST_CHANGE'],
            doc.clusters.flatMap((c: Json) =>
              c.brokers.map((b: Json) => [
                c.tenant,
                b.url,
                b.healthy ? 'up' : 'DOWN',
                String(b.inflight),
                String(b.picks),
                `${(b.keyShare * 100).toFixed(1)}%`,
                change(b.lastChange),
              ]),
            ),
          ) + moreText(doc),
      };
    },
  },
  {
    words: ['stats'],
    args: [],
    summary: 'live figures of the whole instance (every worker): rates, refusals, added latency, Redis, metering',
    async run({ api }) {
      const doc = await api('GET', '/admin/v1/stats');
      // Rates need two reads a second apart: the first call after a start has none.
      const rate = (n: number | null): string => (n === null ? '' : ` (${n.toFixed(1)}/s)`);
      const ms = (n: number | null): string => (n === null ? 'n/a' : `${n} ms`);
      const refusals = Object.entries(doc.refusals.total as Record<string, number>);
      const down = (doc.brokers as Json[]).filter((b) => !b.up).map((b) => b.url);
      return {
        doc,
        human: () =>
          table(
            ['FIGURE', 'VALUE'],
            [
              ['workers', String(doc.workers)],
              ['requests', `${doc.requests.total}${rate(doc.requests.perSecond)}`],
              ['refusals', refusals.length ? refusals.map(([code, n]) => `${code}=${n}`).join(', ') : '-'],
              ['added latency p50 / p99', `${ms(doc.addedLatencyMs.p50)} / ${ms(doc.addedLatencyMs.p99)}`],
              ['parked polls', String(doc.parkedPolls)],
              [
                'redis',
                doc.redis.configured
                  ? `limiter ${Object.keys(doc.redis.limiterModes).join(',') || '-'}, failMode ${doc.redis.failMode}, ${doc.redis.errorsTotal} errors`
                  : 'not configured (in memory)',
              ],
              ['metering flush lag', `${doc.metering.flushLagSeconds} s`],
              ['brokers', `${doc.brokers.length} (${down.length ? `down: ${down.join(', ')}` : 'all up'})`],
            ],
          ),
      };
    },
  },
  {
    words: ['reloads'],
    args: [],
    summary: 'the last configuration reload (SIGHUP): applied or refused, its problems, what needs a restart; exit 1 when it was refused',
    async run({ api }) {
      const doc = await api('GET', '/admin/v1/reloads');
      const last = doc.last;
      const lines = (items: string[]): string => items.map((p) => `  ${p}\n`).join('');
      return {
        doc,
        human: () =>
          last === null
            ? `no reload since the start (applied ${doc.applied}, refused ${doc.refused})\n`
            : `last reload ${last.at}: ${last.result}\n${lines(last.problems)}` +
              (last.restartNeeded.length ? `changed, applied only after a restart:\n${lines(last.restartNeeded)}` : '') +
              `since the start: applied ${doc.applied}, refused ${doc.refused}\n`,
        ...(last?.result === 'refused' ? { failed: 'the last reload was refused: the running configuration is the one before it' } : {}),
      };
    },
  },
  {
    words: ['keys', 'list'],
    args: ['TENANT'],
    summary: "a tenant's API keys (never their secrets)",
    async run({ api, args: [tenant] }) {
      const doc = await api('GET', `/admin/v1/tenants/${tenant}/keys`);
      return {
        doc,
        human: () =>
          table(
            ['ID', 'NAME', 'ROLES', 'CREATED', 'LAST_USED', 'EXPIRES', 'SOURCE'],
            doc.keys.map((k: Json) => [k.id, k.name || '-', k.roles.join(','), k.createdAt ?? '-', k.lastUsedAt ?? '-', k.expiresAt ?? '-', k.source]),
          ),
      };
    },
  },
  {
    words: ['keys', 'create'],
    args: ['TENANT'],
    options: { name: { type: 'string' }, role: { type: 'string', multiple: true }, expires: { type: 'string' } },
    optionsHelp: '--name NAME --role ROLE [--role ROLE]... [--expires ISO]',
    summary: 'a new API key for a tenant, shown this once (docs/api-keys.md)',
    async run({ api, args: [tenant], values }) {
      const roles = (values.role as string[] | undefined) ?? [];
      if (typeof values.name !== 'string' || roles.length === 0) throw new UsageError('keys create needs --name NAME and at least one --role ROLE');
      const body = { name: values.name, roles, ...(typeof values.expires === 'string' ? { expiresAt: values.expires } : {}) };
      const doc = await api('POST', `/admin/v1/tenants/${tenant}/keys`, JSON.stringify(body));
      return {
        doc,
        human: () => `${doc.key}\n\nkey ${doc.id} (${doc.roles.join(',')}) for tenant ${tenant}: shown this once, store it now\n`,
      };
    },
  },
  {
    words: ['keys', 'revoke'],
    args: ['TENANT', 'KEY_ID'],
    summary: 'revoke an API key: every instance refuses it within a second',
    async run({ api, args: [tenant, id] }) {
      const doc = await api('DELETE', `/admin/v1/tenants/${tenant}/keys/${id}`);
      return { doc, human: () => `key ${decodeURIComponent(id!)} revoked\n` };
    },
  },
  {
    words: ['keys', 'new'],
    args: ['TENANT'],
    options: { role: { type: 'string', multiple: true } },
    optionsHelp: '--role ROLE [--role ROLE]...',
    summary: "a key for the config file's apiKeys (no admin API call): the key, and the entry that holds only its hash",
    async run({ args: [tenant], values }) {
      const roles = (values.role as string[] | undefined) ?? [];
      if (roles.length === 0) throw new UsageError('keys new needs at least one --role ROLE');
      const { id, key, hash } = mintKey();
      const entry = { id, tenant: decodeURIComponent(tenant!), roles, sha256: hash };
      return {
        doc: { key, entry },
        human: () => `${key}\n\nadd under apiKeys: in the config file (it holds the hash, never the key):\n  - ${JSON.stringify(entry)}\n`,
      };
    },
  },
  {
    words: ['usage'],
    args: ['TENANT'],
    options: { month: { type: 'string' } },
    optionsHelp: '[--month YYYY-MM]',
    summary: "a tenant's metered usage by day",
    async run({ api, args: [tenant], values }) {
      const range = typeof values.month === 'string' ? monthRange(values.month) : null;
      const q = new URLSearchParams({ granularity: 'day', ...(range ? { from: range[0], to: range[1] } : {}) });
      const doc = await api('GET', `/admin/v1/tenants/${tenant}/usage?${q}`);
      return {
        doc,
        human: () =>
          table(
            ['DAY', 'REQUESTS', 'PUSHED', 'DELIVERED', 'ACKS', 'INGRESS_B', 'EGRESS_B', 'REFUSALS'],
            [...doc.buckets.map((b: Json) => usageRow(b.start.slice(0, 10), b)), usageRow('total', doc.total)],
          ),
      };
    },
  },
  {
    words: ['usage', 'export'],
    args: [],
    options: {
      from: { type: 'string' },
      to: { type: 'string' },
      granularity: { type: 'string' },
      format: { type: 'string' },
      tenant: { type: 'string', multiple: true },
      'omit-zeros': { type: 'boolean' },
    },
    optionsHelp: '[--from ISO] [--to ISO] [--granularity hour|day] [--format csv|jsonl] [--tenant ID]... [--omit-zeros]',
    summary: "every tenant's usage per period, for billing (docs/usage-export.md)",
    async run({ download, values }) {
      const q = new URLSearchParams();
      for (const name of ['from', 'to', 'granularity', 'format'] as const) if (typeof values[name] === 'string') q.set(name, values[name]);
      for (const id of (values.tenant as string[] | undefined) ?? []) q.append('tenant', id);
      if (values['omit-zeros'] === true) q.set('zeros', 'omit');
      await download(`/admin/v1/usage/export?${q}`);
      return null;
    },
  },
  {
    words: ['maintenance'],
    args: ['TENANT'],
    optional: ['on|off'],
    options: { pop: { type: 'boolean' }, broker: { type: 'string' } },
    optionsHelp: '[--pop] [--broker URL]',
    summary: "read or switch the maintenance (or, with --pop, pop maintenance) of a tenant's brokers",
    async run({ api, args: [tenant, to], values }) {
      if (to !== undefined && to !== 'on' && to !== 'off') throw new UsageError('maintenance: expected on or off');
      const broker = typeof values.broker === 'string' ? values.broker : undefined;
      // A 502 still lists every broker's outcome: shown, then exit 1.
      const answer = await withBrokers(
        to === undefined
          ? api('GET', `/admin/v1/tenants/${tenant}/maintenance${broker ? `?broker=${encodeURIComponent(broker)}` : ''}`)
          : api(
              'PUT',
              `/admin/v1/tenants/${tenant}/maintenance`,
              JSON.stringify({ mode: values.pop === true ? 'pop' : 'push', enabled: to === 'on', ...(broker ? { broker } : {}) }),
            ),
      );
      const mode = (on: boolean) => (on ? 'on' : 'off');
      const row = (b: Json) => ('error' in b ? [b.url, '?', '?', b.error] : [b.url, mode(b.maintenance), mode(b.popMaintenance), '-']);
      // The ERROR column only when a broker failed.
      const headers = ['BROKER', 'MAINTENANCE', 'POP_MAINTENANCE', ...(answer.failed ? ['ERROR'] : [])];
      return {
        doc: answer.doc,
        human: () =>
          table(
            headers,
            answer.doc.brokers.map((b: Json) => row(b).slice(0, headers.length)),
          ),
        ...(answer.failed ? { failed: answer.failed } : {}),
      };
    },
  },
];

/** The answer of a maintenance call, including a refusal that still lists the brokers. */
async function withBrokers(call: Promise<Json>): Promise<{ doc: Json; failed?: string }> {
  try {
    return { doc: await call };
  } catch (err) {
    if (err instanceof ApiError && Array.isArray(err.doc?.brokers)) return { doc: err.doc, failed: err.message };
    throw err;
  }
}

/** Options every command takes. */
const SHARED: Options = { url: { type: 'string' }, token: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } };

/** First words of the admin commands (what makes `queen-edge WORD ...` an admin call). */
export const ADMIN_GROUPS: ReadonlySet<string> = new Set(COMMANDS.map((c) => c.words[0]!));

/** The help for the commands whose words start with `group` (all when empty). */
export function adminUsage(group?: string): string {
  const shown = COMMANDS.filter((c) => group === undefined || c.words[0] === group);
  // Each command on its line (continued, indented, past 80 columns), its summary below it.
  const entries = shown.map((c) => {
    const synopsis = `queen-edge ${[...c.words, ...c.args, ...(c.optional ?? []).map((a) => `[${a}]`), ...(c.optionsHelp ? [c.optionsHelp] : [])].join(' ')}`;
    return `${wrap(synopsis, '  ', '        ')}\n${wrap(c.summary, '      ', '      ')}`;
  });
  return `usage:\n${entries.join('\n')}
options: --url URL      admin listener
                        (default $QUEEN_EDGE_ADMIN_URL or http://127.0.0.1:9090)
         --token TOKEN  server.admin.token (default $QUEEN_EDGE_ADMIN_TOKEN)
         --json         the API's JSON instead of a table
`;
}

/** `text` in lines of at most `width` columns, broken at spaces: the first prefixed by `first`, the rest by `rest`. */
export function wrap(text: string, first: string, rest: string, width = 80): string {
  const lines: string[] = [];
  let line = first;
  for (const word of text.split(' ')) {
    const prefix = lines.length === 0 ? first : rest;
    if (line !== prefix && line.length + 1 + word.length > width) {
      lines.push(line);
      line = rest + word;
    } else line += line === prefix ? word : ` ${word}`;
  }
  lines.push(line);
  return lines.join('\n');
}

/** Parses with strict checks, turning node's errors into usage errors. */
function parse(argv: string[], options: Options, strict: boolean): ReturnType<typeof parseArgs<{ options: Options; allowPositionals: true }>> {
  try {
    return parseArgs({ args: argv, options, strict, allowPositionals: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** The command named by the leading positionals (longest match first). */
function findCommand(positionals: readonly string[]): AdminCommand | undefined {
  return [...COMMANDS].sort((a, b) => b.words.length - a.words.length).find((c) => c.words.every((w, i) => positionals[i] === w));
}

/** The call's failure as a person should read it; `tokenFrom` says where the token sent came from (null: none sent). */
function callError(status: number, doc: Json, text: string, base: string, tokenFrom: string | null): ApiError {
  if (doc?.code === 'admin_disabled') {
    return new ApiError(
      `the admin API at ${base} is off: set server.admin.token in the configuration (config/default.yaml reads $QUEEN_EDGE_ADMIN_TOKEN), restart the proxy, and pass the same token with --token or $QUEEN_EDGE_ADMIN_TOKEN`,
      doc,
    );
  }
  const problems = Array.isArray(doc?.problems) ? doc.problems.map((p: string) => `\n  ${p}`).join('') : '';
  return new ApiError(`${status} ${doc?.code ?? ''}: ${doc?.error ?? text}${problems}${status === 401 ? unauthorizedHint(base, tokenFrom) : ''}`, doc);
}

/** After a 401: which token the admin API wants, and where the CLI looked for it. */
function unauthorizedHint(base: string, tokenFrom: string | null): string {
  const wanted = `the admin API at ${base} expects its server.admin.token (config/default.yaml reads $QUEEN_EDGE_ADMIN_TOKEN)`;
  return tokenFrom === null
    ? `\n  no token was sent: ${wanted}; pass it with --token TOKEN or set QUEEN_EDGE_ADMIN_TOKEN`
    : `\n  the token from ${tokenFrom} is not the one ${wanted}; after a rotation, use the new value`;
}

/** The connection to the admin listener was refused: nothing listens there. */
function refusedConnection(err: unknown): boolean {
  const e = err as { code?: unknown; cause?: unknown; errors?: unknown[] } | null;
  if (e === null || typeof e !== 'object') return false;
  return e.code === 'ECONNREFUSED' || refusedConnection(e.cause) || (Array.isArray(e.errors) && e.errors.some(refusedConnection));
}

function unreachableHint(base: string): string {
  return (
    `cannot reach the admin API at ${base}: connection refused. Is queen-edge running on this host? ` +
    'Its admin listener is server.admin.port (9090 unless the configuration or --admin-port says otherwise) on server.admin.host; ' +
    'point the CLI at it with --url URL or QUEEN_EDGE_ADMIN_URL'
  );
}

/** Runs one admin command; resolves to the process exit code. */
export async function runAdminCli(argv: string[], io: CliIo): Promise<number> {
  const allOptions: Options = Object.assign({}, SHARED, ...COMMANDS.map((c) => c.options ?? {}));
  let group: string | undefined;
  let json = false;
  try {
    // A lenient pass first, knowing every option, only to find which command the words name.
    const { positionals, values: loose } = parse(argv, allOptions, false);
    group = ADMIN_GROUPS.has(positionals[0] ?? '') ? positionals[0] : undefined;
    const command = findCommand(positionals);
    if (loose.help === true || (command === undefined && group !== undefined && positionals.length === 1)) {
      io.stdout.write(adminUsage(group));
      return 0;
    }
    if (command === undefined) throw new UsageError(positionals.length ? `unknown command: ${positionals.join(' ')}` : 'missing command');
    const { positionals: all, values } = parse(argv, { ...SHARED, ...command.options }, true);
    json = values.json === true;
    const args = all.slice(command.words.length);
    if (args.length < command.args.length) throw new UsageError(`missing ${command.args[args.length]}`);
    const most = command.args.length + (command.optional?.length ?? 0);
    if (args.length > most) throw new UsageError(`unexpected argument: ${args[most]}`);

    const base = String(values.url ?? io.env.QUEEN_EDGE_ADMIN_URL ?? 'http://127.0.0.1:9090').replace(/\/+$/, '');
    const token = typeof values.token === 'string' ? values.token : io.env.QUEEN_EDGE_ADMIN_TOKEN;
    const tokenFrom = typeof values.token === 'string' ? '--token' : token ? '$QUEEN_EDGE_ADMIN_TOKEN' : null;
    const call = (method: 'GET' | 'PUT' | 'POST' | 'DELETE', path: string, body?: string) => {
      const headers: Record<string, string> = {};
      if (token) headers.authorization = `Bearer ${token}`;
      if (body !== undefined) headers['content-type'] = 'application/json';
      return request(`${base}${path}`, { method, headers, body }).catch((err: unknown) => {
        throw refusedConnection(err) ? new Error(unreachableHint(base), { cause: err }) : err;
      });
    };
    const reply = async (res: Awaited<ReturnType<typeof call>>): Promise<Json> => {
      const text = await res.body.text();
      let doc: Json;
      try {
        doc = text === '' ? null : JSON.parse(text);
      } catch {
        doc = null;
      }
      if (res.statusCode >= 300) throw callError(res.statusCode, doc, text, base, tokenFrom);
      return doc;
    };
    const api: CommandContext['api'] = async (method, path, body) => reply(await call(method, path, body));
    const download: CommandContext['download'] = async (path) => {
      const res = await call('GET', path);
      if (res.statusCode !== 200) await reply(res);
      else await pipeline(res.body, io.stdout, { end: false });
    };
    const shown = await command.run({ args: args.map(encodeURIComponent), values, api, download });
    if (shown) io.stdout.write(json ? `${JSON.stringify(shown.doc, null, 2)}\n` : shown.human());
    if (shown?.failed) {
      io.stderr.write(`queen-edge: ${shown.failed}\n`);
      return 1;
    }
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`queen-edge: ${err.message}\n${adminUsage(group)}`);
      return 2;
    }
    // Scripts asking for JSON get the API's refusal as JSON too.
    if (json && err instanceof ApiError && err.doc !== null && err.doc !== undefined) io.stdout.write(`${JSON.stringify(err.doc, null, 2)}\n`);
    io.stderr.write(`queen-edge: ${(err as Error).message}\n`);
    return 1;
  }
}
