/**
 * The admin listener's handler (docs/operating.md): probes, `/metrics`, and the admin API
 * under `/admin/v1`, JSON in and out, behind `Authorization: Bearer <server.admin.token>`.
 *
 * - No token configured (null or empty): `/admin/*` answers 404, probes and metrics still work.
 * - The token is compared in constant time (SHA-256 digests of both sides, timingSafeEqual), so
 *   neither its content nor its length leaks through timing.
 * - `/metrics` needs no token: scrapers rarely carry one, and the admin listener is meant to be
 *   loopback or cluster-internal (it binds 127.0.0.1 by default).
 * - Every request, probes included, must name the listener in its Host header (hosts.ts): a
 *   browser led there by DNS rebinding sends the attacker's name and gets 403.
 * - Writes go through the tenant store's writers (schema-checked, problems by path), which
 *   publish the change so every instance reloads within a second; each change is logged with
 *   the admin token's id (first 8 hex digits of its SHA-256) and what changed.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import FindMyWay from 'find-my-way';
import type { RawTenant } from '../config/schema.js';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { H1Handler } from '../listen/servers.js';
import { rollUp, UsageCounts, type Granularity } from '../metering/counts.js';
import { alignRange, exportChunks, type ExportFormat, type ExportGranularity, type HourlyReader } from '../metering/export.js';
import type { Logger } from '../observability/log.js';
import type { ReloadHistory } from '../observability/reloads.js';
import { readBody } from '../listen/read-body.js';
import { ID_PATTERN, type Plan, type Tenant } from '../tenants/model.js';
import type { TenantStore, WriteResult } from '../tenants/store.js';
import type { ClusterSnapshot } from '../upstream/clusters.js';
import type { BrokerMaintenance, BrokerMaintenanceState, MaintenanceSwitch } from '../upstream/maintenance.js';
import { answerProbe, type Readiness } from './probes.js';
import { createKey, listKeys, revokeKey, revokeTenantKeys, type KeyAdminDeps } from './keys.js';
import { serveConsole, serveConsoleOff } from './console.js';
import { adminHostAllowed } from './hosts.js';
import { listQuery, SortedTenantIds, tenantPage } from './tenant-list.js';
import { duplicatedSingleton } from '../listen/raw-headers.js';
import { EdgeError, edgeError, isEdgeError, renderError, type AnyErrorCode } from '../errors.js';
import { redactUserInfo } from '../net/redact-url.js';
import { StoreUnavailableError } from '../store/connection.js';

/** What the admin handler reads and writes. */
export interface AdminDeps {
  /** server.admin.token; null or '' disables the admin API. */
  readonly token: string | null;
  /** Host names answered besides IP literals (adminHostNames). */
  readonly hostNames: ReadonlySet<string>;
  readonly tenants: TenantStore;
  /** The raw record in force for a tenant (Redis record or config file entry), for GET. */
  readonly tenantRecord: (id: string) => Promise<RawTenant | null>;
  /** Tenant API keys: create, list, revoke (keys.ts). */
  readonly keys: KeyAdminDeps;
  readonly usage: (tenantId: string, fromMs: number, toMs: number) => Promise<Map<number, UsageCounts>>;
  /** The billing export's side of the usage store: flush this instance's counts, then read without flushing. */
  readonly usageExport: { readonly flush: () => Promise<unknown>; readonly read: HourlyReader };
  /** Live stats (see stats.ts). */
  readonly stats: () => Promise<Record<string, unknown>>;
  /** Plan ids to list: the config file's plus those tenants use. */
  readonly planIds: () => Iterable<string>;
  /** The cluster views of the tenants given (a page of them), in their order: O(those tenants). */
  readonly brokers: (tenants: readonly Tenant[]) => ClusterSnapshot[];
  /** Reads and switches the brokers' maintenance modes. */
  readonly maintenance: BrokerMaintenance;
  readonly readiness: Readiness;
  /** Prometheus exposition text; a multi-worker supervisor passes an aggregating one. */
  readonly metricsText: () => Promise<string>;
  /** The configuration reloads tried since the start (none when absent). */
  readonly reloads?: ReloadHistory;
  readonly log: Logger;
  readonly clock: () => number;
}

/** An admin refusal: a client code (`invalid_request`, `unauthorized`) or an operator-only one. */
type Refusal = EdgeError<AnyErrorCode>;

const BODY_LIMIT = 1024 * 1024;
const MAX_USAGE_RANGE_MS = 366 * 24 * 3600 * 1000;
const GRANULARITIES: readonly Granularity[] = ['hour', 'day', 'month'];

/** One admin API call, as a route's handler gets it. */
interface Call {
  readonly d: AdminDeps;
  readonly req: IncomingMessage;
  readonly params: Readonly<Record<string, string | undefined>>;
  readonly query: URLSearchParams;
  /** Id of the admin token (for change logs). */
  readonly who: string;
  /** The directory's ids in order, for listings. */
  readonly sortedIds: SortedTenantIds;
}
type Reply = { status: number; body?: unknown } | { status: 200; headers: Record<string, string>; stream: Readable };
type Action = (c: Call) => Promise<Reply | Refusal>;

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  if (body === undefined) {
    res.writeHead(status, { 'cache-control': 'no-store' });
    res.end();
    return;
  }
  // Records, broker lists and reload problems may name URLs with credentials: none leave.
  const text = redactUserInfo(JSON.stringify(body));
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), 'cache-control': 'no-store' });
  res.end(text);
}

/** Writes a refusal as renderError renders it, unless a streamed reply already started. */
function sendError(res: ServerResponse, e: Refusal): void {
  if (res.headersSent || res.destroyed) return;
  const r = renderError(e);
  res.writeHead(r.status, r.headers);
  res.end(r.body);
}

function tenantSummary(t: Tenant, store: TenantStore): Record<string, unknown> {
  return {
    id: t.id,
    status: t.status,
    plan: t.plan.id,
    hosts: t.hosts,
    brokers: t.brokers,
    tenancyAwareBrokers: t.tenancyAwareBrokers,
    brokerVersion: t.brokerVersion,
    storage: { usedBytes: store.storageUsed(t.id) ?? null, blocked: store.storageBlocked(t.id) },
    source: sourceView(store, t.id),
  };
}

/**
 * Which source won for a tenant: `record` is the file's entry or an admin API record, `status` the
 * record's own or an admin API override; `fileStatus` is what the file says (what a reset gives).
 */
function sourceView(store: TenantStore, id: string): Record<string, unknown> | null {
  const s = store.sourceOf(id);
  if (s === undefined) return null;
  return {
    record: s.record,
    status: s.status === 'admin' ? 'admin' : s.record,
    inFile: s.inFile,
    overridden: s.inFile && (s.record === 'admin' || s.status === 'admin'),
  };
}

function planView(p: Plan): Record<string, unknown> {
  const view: Record<string, unknown> = { id: p.id, features: [...p.features], limits: p.limits, quotas: p.quotas, storageBytes: p.storageBytes };
  if (p.traceRatio !== null) view.traceRatio = p.traceRatio;
  return view;
}

function countsView(c: UsageCounts): Record<string, unknown> {
  return {
    requests: c.requests,
    messagesPushed: c.messagesPushed,
    messagesDelivered: c.messagesDelivered,
    acks: c.acks,
    ingressBytes: c.ingressBytes,
    egressBytes: c.egressBytes,
    refusals: c.refusals,
  };
}

function writeRefusal(r: WriteResult, what: string): Refusal | null {
  if (r.ok) return null;
  return edgeError(r.conflict ? 'conflict' : 'invalid_request', `${r.conflict ? 'conflicting' : 'invalid'} ${what}: ${r.problems.join('; ')}`, {
    problems: r.problems,
  });
}

/** A tenant's own auth settings as shown and logged: a shared secret never leaves the store. */
function authView(auth: RawTenant['auth'] | undefined): unknown {
  return auth ? { ...auth, secret: auth.secret === null ? null : '(set)' } : null;
}

/** Fixed per listener: the deps, the token's digest and id, and the route table. */
interface AdminState {
  readonly d: AdminDeps;
  /** SHA-256 of server.admin.token; null: the admin API is off. */
  readonly expected: Buffer | null;
  /** Id of the admin token (for change logs). */
  readonly who: string;
  readonly router: FindMyWay.Instance<FindMyWay.HTTPVersion.V1>;
  readonly sortedIds: SortedTenantIds;
}

/** Builds the admin listener's request handler. */
export function createAdminHandler(d: AdminDeps): H1Handler {
  const router = FindMyWay({ caseSensitive: true, ignoreTrailingSlash: true });
  const noop = () => undefined;
  for (const [method, path, action] of ADMIN_ROUTES) router.on(method, path, noop, action);
  const state: AdminState = {
    d,
    expected: d.token ? sha256(d.token) : null,
    who: d.token ? sha256(d.token).toString('hex').slice(0, 8) : '',
    router,
    sortedIds: new SortedTenantIds(),
  };
  return (req, res) => {
    if (duplicatedSingleton(req.rawHeaders) === 'host' || !adminHostAllowed(req.headers.host, d.hostNames)) return refuseHost(res);
    if (answerProbe(req, res, d.readiness)) return;
    serve(state, req, res).catch((err: unknown) => {
      d.log.error({ err }, 'admin handler failure');
      if (!res.headersSent) sendError(res, edgeError('unavailable', 'internal error'));
      else res.destroy();
    });
  };
}

/** The console, `/metrics`, then the admin API behind the token. */
async function serve(s: AdminState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = req.url ?? '/';
  const q = url.indexOf('?');
  const path = q === -1 ? url : url.slice(0, q);
  if (s.expected !== null ? await serveConsole(path, req, res) : serveConsoleOff(path, req, res)) return;
  if (path === '/metrics' && req.method === 'GET') return serveMetrics(s.d, res);
  if (!(path === '/admin' || path.startsWith('/admin/'))) return sendError(res, edgeError('not_found', 'not found'));
  if (s.expected === null) return sendError(res, edgeError('admin_disabled'));
  // renderError adds `WWW-Authenticate: Bearer` to every `unauthorized`.
  if (!authorized(req, s.expected)) return sendError(res, edgeError('unauthorized', 'missing or invalid admin token'));
  const found = s.router.find(req.method as 'GET', path);
  if (!found) return sendError(res, edgeError('not_found', 'no such admin route'));
  const call: Call = { d: s.d, req, params: found.params, query: new URLSearchParams(q === -1 ? '' : url.slice(q + 1)), who: s.who, sortedIds: s.sortedIds };
  let out: Reply | Refusal;
  try {
    out = await (found.store as Action)(call);
  } catch (err) {
    s.d.log.warn({ err, path }, 'admin API: store unavailable');
    out = edgeError(err instanceof StoreUnavailableError ? 'store_unavailable' : 'unavailable');
  }
  return writeReply(s.d, res, path, out);
}

async function serveMetrics(d: AdminDeps, res: ServerResponse): Promise<void> {
  const text = await d.metricsText();
  res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8', 'cache-control': 'no-store' });
  res.end(text);
}

function authorized(req: IncomingMessage, expected: Buffer): boolean {
  const header = req.headers.authorization;
  if (typeof header !== 'string' || !/^bearer /i.test(header)) return false;
  return timingSafeEqual(sha256(header.slice(7).trim()), expected);
}

async function writeReply(d: AdminDeps, res: ServerResponse, path: string, out: Reply | Refusal): Promise<void> {
  if (out instanceof EdgeError) return sendError(res, out);
  if (!('stream' in out)) return send(res, out.status, out.body);
  res.writeHead(out.status, out.headers);
  // A store failure mid-stream cuts the response before its last chunk: clients see a truncated
  // transfer as an error instead of a short export.
  await pipeline(out.stream, res).catch((err: unknown) => d.log.warn({ err, path }, 'admin API: usage export interrupted'));
}

function logChange(c: Call, action: string, target: string, change?: unknown, result: { outcome: string } = { outcome: 'done' }): void {
  c.d.log[result.outcome === 'done' ? 'info' : 'warn'](
    { admin: c.who, action, target, ...(change === undefined ? {} : { change }), ...result },
    'admin change',
  );
}

/** Guards every write: the store refuses them without Redis; ids must fit keys and URLs. */
function writable(d: AdminDeps, id: string): Refusal | null {
  if (d.tenants.backing === 'static') return edgeError('read_only');
  if (!ID_PATTERN.test(id)) return edgeError('invalid_request', `id: must match ${ID_PATTERN.source}`);
  return null;
}

async function tenantDetail(d: AdminDeps, t: Tenant): Promise<Record<string, unknown>> {
  const record = await d.tenantRecord(t.id);
  return {
    ...tenantSummary(t, d.tenants),
    cors: { origins: record?.cors.origins ?? [] },
    limits: record?.limits ?? {},
    boundedLoadFactor: t.boundedLoadFactor,
    auth: authView(record?.auth),
    effectiveLimits: t.limits,
  };
}

function existing(d: AdminDeps, id: string): Tenant | Refusal {
  return d.tenants.byId(id) ?? edgeError('not_found', `no tenant "${id}"`);
}

/** A page of the tenants in id order, filtered (tenant-list.ts); `next` is the cursor of the page after it, null after the last. */
async function listTenants(c: Call): Promise<Reply | Refusal> {
  return pageOfTenants(c, 'tenants', (t) => tenantSummary(t, c.d.tenants));
}

/** A page of the tenants (the query's paging and filters) as `field`, each rendered by `view`. */
function pageOfTenants(c: Call, field: string, view: (t: Tenant) => unknown): Reply | Refusal {
  const q = listQuery(c.query);
  if (q instanceof EdgeError) return q;
  const ids = tenantIds(c);
  const page = tenantPage(ids, (id) => c.d.tenants.byId(id), q, view);
  return { status: 200, body: { [field]: page.tenants, next: page.next, total: ids.length } };
}

function tenantIds(c: Call): readonly string[] {
  return c.sortedIds.of(c.d.tenants.generation, () => c.d.tenants.all());
}

async function getTenant(c: Call): Promise<Reply | Refusal> {
  const t = existing(c.d, c.params.id!);
  return t instanceof EdgeError ? t : { status: 200, body: await tenantDetail(c.d, t) };
}

async function putTenant(c: Call): Promise<Reply | Refusal> {
  const id = c.params.id!;
  const body = await jsonBody(c.req);
  if (body instanceof EdgeError) return body;
  const refused = writable(c.d, id) ?? writeRefusal(await c.d.tenants.putTenant(id, body, c.who), 'tenant');
  if (refused) return refused;
  logChange(c, 'tenant.put', id, { ...(body as object), auth: authView(c.d.tenants.recordOf(id)?.auth) });
  return { status: 200, body: await tenantDetail(c.d, c.d.tenants.byId(id)!) };
}

async function deleteTenant(c: Call): Promise<Reply | Refusal> {
  const id = c.params.id!;
  const refused = writable(c.d, id);
  if (refused) return refused;
  const existed = await c.d.tenants.deleteTenant(id, c.who);
  // Revoked even when the tenant is gone already: a DELETE repeated after its keys could not be
  // revoked finishes the job, so the id's next tenant never inherits them.
  const keys = await revokeTenantKeys(c.d.keys, id, c.who);
  if (keys instanceof EdgeError) {
    c.d.log.warn({ tenant: id, code: keys.code }, 'tenant deleted but its API keys not revoked yet: repeat the DELETE');
    return edgeError(keys.code, `tenant "${id}" is deleted, but its API keys could not be revoked yet: repeat the DELETE`);
  }
  if (!existed && keys.length === 0) return edgeError('not_found', `no tenant "${id}"`);
  logChange(c, 'tenant.delete', id, keys.length > 0 ? { keysRevoked: keys } : undefined);
  return { status: 204 };
}

/**
 * A change to an existing tenant with no body (`write`, refused as `what`), logged as `action`;
 * answers the tenant as it is now. `deletedToo`: a file tenant the API deleted is no tenant in
 * force, yet one this change brings back (a reset).
 */
function tenantChange(
  action: string,
  what: string,
  write: (tenants: TenantStore, id: string, actor: string) => Promise<WriteResult>,
  deletedToo = false,
): Action {
  return async (c) => {
    const id = c.params.id!;
    const t = existing(c.d, id);
    if (t instanceof EdgeError && !(deletedToo && c.d.tenants.overridden().includes(id))) return t;
    const refused = writable(c.d, id) ?? writeRefusal(await write(c.d.tenants, id, c.who), what);
    if (refused) return refused;
    logChange(c, action, id);
    return { status: 200, body: await tenantDetail(c.d, c.d.tenants.byId(id)!) };
  };
}

async function putStorage(c: Call): Promise<Reply | Refusal> {
  const id = c.params.id!;
  const t = existing(c.d, id);
  if (t instanceof EdgeError) return t;
  const body = await jsonBody(c.req);
  if (body instanceof EdgeError) return body;
  const keys = body && typeof body === 'object' && !Array.isArray(body) ? Object.keys(body) : null;
  const usedBytes = (body as { usedBytes?: unknown } | null)?.usedBytes;
  if (keys?.length !== 1 || typeof usedBytes !== 'number' || !Number.isSafeInteger(usedBytes) || usedBytes < 0) {
    return edgeError('invalid_request', 'usedBytes: must be a non-negative integer (and the only field)', {
      problems: ['usedBytes: must be a non-negative integer'],
    });
  }
  const refused = writable(c.d, id) ?? writeRefusal(await c.d.tenants.setStorageUsed(id, usedBytes, c.who), 'storage');
  if (refused) return refused;
  logChange(c, 'tenant.storage', id, { usedBytes });
  return { status: 200, body: tenantSummary(c.d.tenants.byId(id)!, c.d.tenants) };
}

async function getPlan(c: Call): Promise<Reply | Refusal> {
  const p = c.d.tenants.planById(c.params.id!);
  return p ? { status: 200, body: planView(p) } : edgeError('not_found', `no plan "${c.params.id}"`);
}

async function putPlan(c: Call): Promise<Reply | Refusal> {
  const id = c.params.id!;
  const body = await jsonBody(c.req);
  if (body instanceof EdgeError) return body;
  const refused = writable(c.d, id) ?? writeRefusal(await c.d.tenants.putPlan(id, body, c.who), 'plan');
  if (refused) return refused;
  logChange(c, 'plan.put', id, body);
  return { status: 200, body: planView(c.d.tenants.planById(id)!) };
}

/** The file's plans and those tenants are on, each with its tenant count: O(plans), whatever the number of tenants. */
async function listPlans(c: Call): Promise<Reply> {
  const d = c.d;
  const counts = d.tenants.tenantsByPlan();
  const ids = [...new Set([...d.planIds(), ...counts.keys()])].sort();
  const plans = ids.map((id) => d.tenants.planById(id)).filter((p) => p !== undefined);
  return {
    status: 200,
    body: {
      writable: d.tenants.backing !== 'static',
      backing: d.tenants.backing,
      plans: plans.map((p) => ({ ...planView(p), tenants: counts.get(p.id) ?? 0 })),
    },
  };
}

async function tenantUsage(c: Call): Promise<Reply | Refusal> {
  const id = c.params.id!;
  if (!ID_PATTERN.test(id) && !c.d.tenants.byId(id)) return edgeError('invalid_request', `id: must match ${ID_PATTERN.source}`);
  const range = usageRange(c.query, c.d.clock());
  if (range instanceof EdgeError) return range;
  // Deleted tenants stay readable: their last period still has to be billed.
  const hours = await c.d.usage(id, range.fromMs, range.toMs);
  const total = sumOf(hours);
  return {
    status: 200,
    body: {
      tenant: id,
      from: new Date(range.fromMs).toISOString(),
      to: new Date(range.toMs).toISOString(),
      granularity: range.granularity,
      buckets: rollUp(hours, range.granularity).map((b) => ({ start: new Date(b.start).toISOString(), ...countsView(b.counts) })),
      total: countsView(total),
    },
  };
}

/**
 * The totals over one range (default: this UTC month so far) of a page of tenants, chosen as
 * `GET /admin/v1/tenants` chooses them (same cursor, limit and filters): what the console's
 * Tenants page lists beside them.
 */
async function usageTotals(c: Call): Promise<Reply | Refusal> {
  const range = usageRange(c.query, c.d.clock(), 'month');
  if (range instanceof EdgeError) return range;
  const q = listQuery(c.query);
  if (q instanceof EdgeError) return q;
  const page = tenantPage(
    tenantIds(c),
    (id) => c.d.tenants.byId(id),
    q,
    (t) => t.id,
  );
  const totals = await Promise.all(page.tenants.map(async (id) => ({ tenant: id, total: countsView(sumOf(await c.d.usage(id, range.fromMs, range.toMs))) })));
  return { status: 200, body: { from: new Date(range.fromMs).toISOString(), to: new Date(range.toMs).toISOString(), tenants: totals, next: page.next } };
}

async function usageExport(c: Call): Promise<Reply | Refusal> {
  const range = usageRange(c.query, c.d.clock(), 'hour');
  if (range instanceof EdgeError) return range;
  if (range.granularity === 'month') return edgeError('invalid_request', 'granularity: must be hour or day');
  const format = c.query.get('format') ?? 'csv';
  if (format !== 'csv' && format !== 'jsonl') return edgeError('invalid_request', 'format: must be csv or jsonl');
  const zeros = c.query.get('zeros') ?? 'include';
  if (zeros !== 'include' && zeros !== 'omit') return edgeError('invalid_request', 'zeros: must be include or omit');
  const named = c.query.getAll('tenant');
  const bad = named.find((id) => !ID_PATTERN.test(id));
  if (bad !== undefined) return edgeError('invalid_request', `tenant: must match ${ID_PATTERN.source}`);
  const granularity = range.granularity as ExportGranularity;
  const aligned = alignRange(range.fromMs, range.toMs, granularity);
  // Named tenants may be deleted ones (their last period is still billed); else every current tenant.
  const tenants = named.length > 0 ? [...new Set(named)] : tenantIds(c);
  await c.d.usageExport.flush();
  const name = `usage-${new Date(aligned.fromMs).toISOString().slice(0, 13)}-${granularity}.${format}`;
  return {
    status: 200,
    headers: {
      'content-type': format === 'csv' ? 'text/csv; charset=utf-8' : 'application/jsonl; charset=utf-8',
      'content-disposition': `attachment; filename="${name}"`,
      'cache-control': 'no-store',
    },
    stream: Readable.from(
      exportChunks({ tenants, ...aligned, granularity, format: format as ExportFormat, omitZeros: zeros === 'omit' }, c.d.usageExport.read),
    ),
  };
}

/**
 * The cluster views of a page of tenants, chosen as `GET /admin/v1/tenants` chooses them (same
 * cursor, limit and filters), or of the one `tenant` names: only those tenants are viewed, so the
 * answer costs the page, not the directory.
 */
async function listBrokers(c: Call): Promise<Reply | Refusal> {
  const one = c.query.get('tenant');
  if (one !== null) {
    if ([...c.query.keys()].some((k) => k !== 'tenant')) return edgeError('invalid_request', 'tenant: names one tenant, without paging or filters');
    const t = existing(c.d, one);
    return t instanceof EdgeError ? t : { status: 200, body: { clusters: c.d.brokers([t]), next: null } };
  }
  return pageOfTenants(c, 'clusters', (t) => c.d.brokers([t])[0]!);
}

// Broker maintenance, for all of a tenant's brokers or the one named by `broker`; 502 when a
// broker could not be read or switched (the body still lists every broker's outcome).
function maintenanceTargets(t: Tenant, broker: unknown): string[] | Refusal {
  if (broker === undefined || broker === null) return [...t.brokers];
  return typeof broker === 'string' && t.brokers.includes(broker) ? [broker] : edgeError('invalid_request', `broker: not a broker of tenant "${t.id}"`);
}

/** The error names each failed broker and what happened: down, or up and answering another status. */
function maintenanceReply(t: Tenant, brokers: BrokerMaintenanceState[]): Reply {
  const failed = brokers.filter((b) => 'error' in b).map((b) => `${b.url}: ${b.error}`);
  return { status: failed.length ? 502 : 200, body: { tenant: t.id, brokers, ...(failed.length ? { error: failed.join('; '), code: 'bad_gateway' } : {}) } };
}

async function getMaintenance(c: Call): Promise<Reply | Refusal> {
  const t = existing(c.d, c.params.id!);
  if (t instanceof EdgeError) return t;
  const targets = maintenanceTargets(t, c.query.get('broker') ?? undefined);
  if (targets instanceof EdgeError) return targets;
  return maintenanceReply(t, await Promise.all(targets.map((url) => c.d.maintenance.read(url, t.id))));
}

async function putMaintenance(c: Call): Promise<Reply | Refusal> {
  const t = existing(c.d, c.params.id!);
  if (t instanceof EdgeError) return t;
  const body = (await jsonBody(c.req)) as { mode?: unknown; enabled?: unknown; broker?: unknown } | Refusal;
  if (body instanceof EdgeError) return body;
  const mode = body?.mode ?? 'push';
  if ((mode !== 'push' && mode !== 'pop') || typeof body?.enabled !== 'boolean') {
    return edgeError('invalid_request', 'expected {"mode":"push"|"pop","enabled":true|false,"broker"?:URL}', {
      problems: ['mode: push or pop', 'enabled: boolean'],
    });
  }
  const targets = maintenanceTargets(t, body.broker);
  if (targets instanceof EdgeError) return targets;
  const enabled = body.enabled;
  const states = await Promise.all(targets.map((url) => c.d.maintenance.set(url, t.id, mode as MaintenanceSwitch, enabled)));
  // Logged after the brokers answered, with what they did: a refused switch is not recorded as done.
  const failed = states.flatMap((b) => ('error' in b ? [{ url: b.url, error: b.error }] : []));
  const outcome = failed.length === 0 ? 'done' : failed.length === states.length ? 'failed' : 'partial';
  logChange(c, 'broker.maintenance', t.id, { mode, enabled, brokers: targets }, { outcome, ...(failed.length ? { failed } : {}) });
  return maintenanceReply(t, states);
}

async function liveStats(c: Call): Promise<Reply> {
  return { status: 200, body: await c.d.stats() };
}

async function reloadsView(c: Call): Promise<Reply> {
  const r = c.d.reloads;
  return {
    status: 200,
    body: { last: r?.last ?? null, restartNeeded: r?.restartNeeded ?? [], applied: r?.counts.applied ?? 0, refused: r?.counts.refused ?? 0 },
  };
}

async function postKey(c: Call): Promise<Reply | Refusal> {
  const body = await jsonBody(c.req);
  const out = body instanceof EdgeError ? body : await createKey(c.d.keys, c.params.id!, body, c.who);
  // The key id names it in the log; the key itself is in the answer only.
  if (!(out instanceof EdgeError)) logChange(c, 'key.create', c.params.id!, { id: (out.body as { id: string }).id, roles: (body as { roles: unknown }).roles });
  return out;
}

async function getKeys(c: Call): Promise<Reply | Refusal> {
  return listKeys(c.d.keys, c.params.id!);
}

async function deleteKey(c: Call): Promise<Reply | Refusal> {
  const out = await revokeKey(c.d.keys, c.params.id!, c.params.keyId!, c.who);
  if (!(out instanceof EdgeError)) logChange(c, 'key.revoke', c.params.id!, { id: c.params.keyId });
  return out;
}

/** The admin API: one row per endpoint (docs/reference.md). */
const ADMIN_ROUTES: readonly (readonly ['GET' | 'PUT' | 'POST' | 'DELETE', string, Action])[] = [
  ['GET', '/admin/v1/tenants', listTenants],
  ['GET', '/admin/v1/tenants/:id', getTenant],
  ['PUT', '/admin/v1/tenants/:id', putTenant],
  ['DELETE', '/admin/v1/tenants/:id', deleteTenant],
  ['POST', '/admin/v1/tenants/:id/suspend', tenantChange('tenant.suspend', 'status', (s, id, who) => s.setStatus(id, 'suspended', who))],
  ['POST', '/admin/v1/tenants/:id/resume', tenantChange('tenant.resume', 'status', (s, id, who) => s.setStatus(id, 'active', who))],
  // Drops the admin API's overrides of a tenant of the file: its record and status are the file's again.
  ['DELETE', '/admin/v1/tenants/:id/overrides', tenantChange('tenant.reset', 'reset', (s, id, who) => s.resetToFile(id, who), true)],
  ['POST', '/admin/v1/tenants/:id/keys', postKey],
  ['GET', '/admin/v1/tenants/:id/keys', getKeys],
  ['DELETE', '/admin/v1/tenants/:id/keys/:keyId', deleteKey],
  ['PUT', '/admin/v1/tenants/:id/storage', putStorage],
  ['GET', '/admin/v1/tenants/:id/usage', tenantUsage],
  ['GET', '/admin/v1/tenants/:id/maintenance', getMaintenance],
  ['PUT', '/admin/v1/tenants/:id/maintenance', putMaintenance],
  ['GET', '/admin/v1/plans', listPlans],
  ['GET', '/admin/v1/plans/:id', getPlan],
  ['PUT', '/admin/v1/plans/:id', putPlan],
  ['GET', '/admin/v1/usage', usageTotals],
  ['GET', '/admin/v1/usage/export', usageExport],
  ['GET', '/admin/v1/brokers', listBrokers],
  ['GET', '/admin/v1/stats', liveStats],
  ['GET', '/admin/v1/reloads', reloadsView],
];

/** A request whose Host does not name the listener: refused before any endpoint is looked at. */
function refuseHost(res: ServerResponse): void {
  sendError(res, edgeError('forbidden', 'Host not allowed on the admin listener (server.admin.allowedHosts)'));
}

/** The request body as JSON; a refusal for an oversized or malformed one. */
async function jsonBody(req: IncomingMessage): Promise<unknown | Refusal> {
  const buf = await readBody(req, BODY_LIMIT);
  if (isEdgeError(buf)) return edgeError('invalid_request', buf.message);
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch (err) {
    return edgeError('invalid_request', `malformed JSON: ${(err as Error).message}`);
  }
}

function sumOf(hours: ReadonlyMap<number, UsageCounts>): UsageCounts {
  const total = new UsageCounts();
  for (const h of hours.values()) total.add(h);
  return total;
}

/** `from`/`to` (ISO 8601; default: this UTC month so far) and `granularity` (default `defaultGranularity`). */
function usageRange(
  query: URLSearchParams,
  now: number,
  defaultGranularity: Granularity = 'day',
): { fromMs: number; toMs: number; granularity: Granularity } | Refusal {
  const d = new Date(now);
  const parse = (name: string, fallback: number): number | Refusal => {
    const v = query.get(name);
    if (v === null) return fallback;
    const ms = Date.parse(v);
    return Number.isNaN(ms) ? edgeError('invalid_request', `${name}: not an ISO 8601 date-time`) : ms;
  };
  const fromMs = parse('from', Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
  if (fromMs instanceof EdgeError) return fromMs;
  const toMs = parse('to', now + 1);
  if (toMs instanceof EdgeError) return toMs;
  const g = query.get('granularity') ?? defaultGranularity;
  if (!GRANULARITIES.includes(g as Granularity)) return edgeError('invalid_request', 'granularity: must be hour, day or month');
  if (toMs <= fromMs) return edgeError('invalid_request', 'to: must be after from');
  if (toMs - fromMs > MAX_USAGE_RANGE_MS) return edgeError('invalid_request', 'to: range longer than 366 days');
  return { fromMs, toMs, granularity: g as Granularity };
}
