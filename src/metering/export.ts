/**
 * The billing export (docs/usage-export.md): one line per tenant per period, every counter, in
 * CSV or JSON Lines, produced as an async sequence of text chunks so a caller can stream it.
 *
 * Memory stays bounded whatever the range and tenant count: tenants are read in batches small
 * enough that a batch holds at most READ_BUDGET_HOURS hourly buckets, one chunk is yielded per
 * tenant, and the next batch is read only when the consumer pulls (so a slow client holds back
 * the reads instead of letting rows pile up).
 */
import { ERROR_CATALOGUE, type ErrorCode } from '../errors.js';
import { HOUR_MS, UsageCounts, bucketStart, rollUp } from './counts.js';

export type ExportGranularity = 'hour' | 'day';
export type ExportFormat = 'csv' | 'jsonl';

/** Reads a tenant's hourly counts for hours starting in [fromMs, toMs). */
export type HourlyReader = (tenantId: string, fromMs: number, toMs: number) => Promise<Map<number, UsageCounts>>;

export interface ExportRequest {
  readonly tenants: readonly string[];
  /** Both on period boundaries of `granularity` (see alignRange). */
  readonly fromMs: number;
  readonly toMs: number;
  readonly granularity: ExportGranularity;
  readonly format: ExportFormat;
  /** Leave out rows where nothing was counted (`zeros=omit`); by default every tenant has a row per period. */
  readonly omitZeros?: boolean;
}

const REFUSAL_CODES = Object.keys(ERROR_CATALOGUE) as ErrorCode[];

/** The stable column names, in order; refusal columns follow the error catalogue. */
export const EXPORT_COLUMNS: readonly string[] = [
  'period_start',
  'period_end',
  'tenant',
  'requests',
  'messages_pushed',
  'messages_delivered',
  'acks',
  'ingress_bytes',
  'egress_bytes',
  'refusals_total',
  ...REFUSAL_CODES.map((c) => `refusals_${c}`),
];

/**
 * Hourly buckets one read batch may hold (tenants × hours in range): a month of hours for 13
 * tenants, about 400 day hashes in flight, well inside the usage store's command timeout.
 */
const READ_BUDGET_HOURS = 10_000;

/** [from, to) widened to whole periods: from rounded down, to rounded up. */
export function alignRange(fromMs: number, toMs: number, granularity: ExportGranularity): { fromMs: number; toMs: number } {
  const from = bucketStart(fromMs, granularity);
  const last = bucketStart(toMs - 1, granularity);
  return { fromMs: from, toMs: last + (granularity === 'hour' ? HOUR_MS : 24 * HOUR_MS) };
}

/** Tenants read together: as many as fit READ_BUDGET_HOURS, at least one. */
export function batchSize(fromMs: number, toMs: number): number {
  return Math.max(1, Math.floor(READ_BUDGET_HOURS / Math.max(1, Math.ceil((toMs - fromMs) / HOUR_MS))));
}

/** First characters a spreadsheet reads as the start of a formula (docs/usage-export.md). */
const FORMULA_START = /^[=+\-@\t\r]/;

/**
 * A text field as CSV, safe to open in a spreadsheet: always quoted (RFC 4180), and one that could
 * start a formula gets a leading `'`, which spreadsheets show as text and never evaluate.
 */
export function csvText(s: string): string {
  const text = FORMULA_START.test(s) ? `'${s}` : s;
  return `"${text.replaceAll('"', '""')}"`;
}

/** One period, its bounds already rendered (they repeat for every tenant). */
interface Period {
  readonly start: number;
  readonly startIso: string;
  readonly endIso: string;
}

const NO_REFUSALS_CSV = REFUSAL_CODES.map(() => ',0').join('');

/** One line (with its newline) in the given format. Hot: runs once per tenant per period. */
export function formatRow(format: ExportFormat, tenant: string, p: Period, c: UsageCounts): string {
  let refused = 0;
  let hasRefusals = false;
  for (const k in c.refusals) {
    refused += c.refusals[k as ErrorCode] ?? 0;
    hasRefusals = true;
  }
  if (format === 'csv') {
    let line = `"${p.startIso}","${p.endIso}",${csvText(tenant)},${c.requests},${c.messagesPushed},${c.messagesDelivered},${c.acks},${c.ingressBytes},${c.egressBytes},${refused}`;
    if (!hasRefusals) line += NO_REFUSALS_CSV;
    else for (const code of REFUSAL_CODES) line += `,${c.refusals[code] ?? 0}`;
    return `${line}\n`;
  }
  const doc: Record<string, string | number> = {
    period_start: p.startIso,
    period_end: p.endIso,
    tenant,
    requests: c.requests,
    messages_pushed: c.messagesPushed,
    messages_delivered: c.messagesDelivered,
    acks: c.acks,
    ingress_bytes: c.ingressBytes,
    egress_bytes: c.egressBytes,
    refusals_total: refused,
  };
  for (const code of REFUSAL_CODES) doc[`refusals_${code}`] = c.refusals[code] ?? 0;
  return `${JSON.stringify(doc)}\n`;
}

/** Nothing counted: every field 0 and no refusal. */
function isZero(c: UsageCounts): boolean {
  if (c.requests + c.messagesPushed + c.messagesDelivered + c.acks + c.ingressBytes + c.egressBytes !== 0) return false;
  for (const _ in c.refusals) return false;
  return true;
}

/** Every period of the range, zeros included, so each tenant has exactly one line per period. */
function periods(fromMs: number, toMs: number, granularity: ExportGranularity): Period[] {
  const step = granularity === 'hour' ? HOUR_MS : 24 * HOUR_MS;
  const out: Period[] = [];
  for (let t = fromMs; t < toMs; t += step) out.push({ start: t, startIso: new Date(t).toISOString(), endIso: new Date(t + step).toISOString() });
  return out;
}

/** The export as text chunks: the CSV header first (CSV only), then one chunk per tenant (none for a tenant whose rows were all left out). */
export async function* exportChunks(req: ExportRequest, read: HourlyReader): AsyncGenerator<string> {
  if (req.format === 'csv') yield `${EXPORT_COLUMNS.join(',')}\n`;
  const all = periods(req.fromMs, req.toMs, req.granularity);
  const size = batchSize(req.fromMs, req.toMs);
  const empty = new UsageCounts();
  for (let i = 0; i < req.tenants.length; i += size) {
    const ids = req.tenants.slice(i, i + size);
    const hours = await Promise.all(ids.map((id) => read(id, req.fromMs, req.toMs)));
    for (let k = 0; k < ids.length; k++) {
      const byStart = req.granularity === 'hour' ? hours[k]! : new Map(rollUp(hours[k]!, req.granularity).map((b) => [b.start, b.counts]));
      let chunk = '';
      for (const p of all) {
        const c = byStart.get(p.start) ?? empty;
        if (req.omitZeros !== true || !isZero(c)) chunk += formatRow(req.format, ids[k]!, p, c);
      }
      if (chunk !== '') yield chunk;
    }
  }
}
