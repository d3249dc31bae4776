/**
 * One renderer for every refusal: the admin API's operator codes are EdgeErrors rendered by
 * renderError, in the admin API's exact wire form, and they stay out of the client contracts
 * (the usage export's refusal columns, the error table of docs/reference.md).
 */
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { ERROR_CATALOGUE, OPERATOR_ERRORS, edgeError, renderError, type EdgeError } from '../../src/errors.js';
import { EXPORT_COLUMNS } from '../../src/metering/export.js';
import { renderReference } from '../../src/routes/reference.js';
import { ROUTES } from '../../src/routes/table.js';

const OPERATOR_CODES = ['not_found', 'admin_disabled', 'read_only', 'conflict', 'unavailable', 'store_unavailable'];

describe('operator refusals', () => {
  it('have the admin API statuses', () => {
    expect(Object.fromEntries(Object.entries(OPERATOR_ERRORS).map(([code, e]) => [code, e.status]))).toEqual({
      not_found: 404,
      admin_disabled: 404,
      read_only: 409,
      conflict: 409,
      unavailable: 503,
      store_unavailable: 503,
    });
    expect(Object.keys(OPERATOR_ERRORS).sort()).toEqual([...OPERATOR_CODES].sort());
  });

  it('render as {"error","code","problems"} with the same headers as every refusal', () => {
    const r = renderError(edgeError('conflict', 'conflicting tenant: hosts: taken', { problems: ['hosts: taken'] }));
    expect(r.status).toBe(409);
    expect(r.body).toBe('{"error":"conflicting tenant: hosts: taken","code":"conflict","problems":["hosts: taken"]}');
    expect(r.headers).toEqual({ 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(r.body)), 'cache-control': 'no-store' });
  });

  it('render without problems as the two fields only', () => {
    const r = renderError(edgeError('admin_disabled'));
    expect(r.status).toBe(404);
    expect(r.body).toBe('{"error":"the admin API is off: no server.admin.token configured","code":"admin_disabled"}');
    expect(Object.keys(r.headers)).toEqual(['content-type', 'content-length', 'cache-control']);
  });

  it('an admin 401 carries WWW-Authenticate like a client one', () => {
    const r = renderError(edgeError('unauthorized', 'missing or invalid admin token'));
    expect(r.status).toBe(401);
    expect(r.body).toBe('{"error":"missing or invalid admin token","code":"unauthorized"}');
    expect(r.headers['www-authenticate']).toBe('Bearer');
  });

  it('a client refusal renders as before: no problems key, Retry-After kept', () => {
    const r = renderError(edgeError('rate_limited', undefined, { retryAfterSec: 1.2 }));
    expect(r.body).toBe('{"error":"rate limit exceeded","code":"rate_limited"}');
    expect(r.headers['retry-after']).toBe('2');
  });

  it('a plain EdgeError is a client refusal: an operator code does not fit it', () => {
    // @ts-expect-error not_found is an operator code: the request path (and metering) cannot be handed one.
    const e: EdgeError = edgeError('not_found');
    expect(e.status).toBe(404);
  });
});

describe('client contracts leave operator codes out', () => {
  it('the error catalogue, the usage export columns and the reference table have no operator code', () => {
    const reference = renderReference(ROUTES);
    for (const code of OPERATOR_CODES) {
      expect(Object.keys(ERROR_CATALOGUE)).not.toContain(code);
      expect(EXPORT_COLUMNS).not.toContain(`refusals_${code}`);
      expect(reference).not.toContain(`\`${code}\``);
    }
  });

  it('the usage export refusal columns are the ones docs/usage-export.md lists', async () => {
    const doc = await readFile(new URL('../../docs/usage-export.md', import.meta.url), 'utf8');
    const row = doc.split('\n').find((l) => l.startsWith('| `refusals_<code>`'))!;
    const documented = [...row.matchAll(/`(refusals_[a-z_]+)`/g)].map((m) => m[1]);
    expect(EXPORT_COLUMNS.filter((c) => c.startsWith('refusals_') && c !== 'refusals_total')).toEqual(documented);
  });
});
