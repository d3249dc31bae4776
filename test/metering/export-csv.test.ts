/**
 * The CSV usage export is safe to open in a spreadsheet: every text field is quoted, and one that
 * starts like a formula (`= + - @`, tab, carriage return) is prefixed with `'`. Through a real
 * admin listener for a tenant id a spreadsheet would evaluate (`-A1`), and on the field function.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csvText } from '../../src/metering/export.js';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';
import { ADMIN_TOKEN, admin } from '../admin/admin-call.js';

let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(testConfig([broker.url], { server: { admin: { token: ADMIN_TOKEN } } }));
});

afterAll(async () => {
  await edge?.close();
  await broker?.close();
});

/** Splits one CSV line per RFC 4180 (quoted fields, doubled quotes). */
function fields(line: string): string[] {
  const out: string[] = [];
  const re = /("(?:[^"]|"")*"|[^,]*)(,|$)/gy;
  for (let m = re.exec(line); m !== null && m[0] !== ''; m = re.exec(line)) {
    out.push(m[1]!);
    if (m[2] === '') break;
  }
  return out;
}

describe('formula-safe CSV export', () => {
  it('quotes the tenant and period fields and defuses a tenant id starting with "-"', async () => {
    const r = await admin(edge, 'GET', '/admin/v1/usage/export?from=2026-11-05T00:00:00Z&to=2026-11-06T00:00:00Z&granularity=day&tenant=-A1&tenant=acme');
    expect(r.status).toBe(200);
    const [, ...rows] = r.text.trimEnd().split('\n').map(fields);
    expect(rows.map((f) => f.slice(0, 3))).toEqual([
      ['"2026-11-05T00:00:00.000Z"', '"2026-11-06T00:00:00.000Z"', `"'-A1"`],
      ['"2026-11-05T00:00:00.000Z"', '"2026-11-06T00:00:00.000Z"', '"acme"'],
    ]);
    // Numbers stay bare, so a loader reads them as numbers.
    expect(rows[0]!.slice(3).every((f) => /^\d+$/.test(f))).toBe(true);
  });

  it.each([
    ['=1+1', `"'=1+1"`],
    ['+A1', `"'+A1"`],
    ['-A1', `"'-A1"`],
    ['@SUM(A1)', `"'@SUM(A1)"`],
    ['\tx', `"'\tx"`],
    ['\rx', `"'\rx"`],
    ['a"b,c', '"a""b,c"'],
    ['=a"b', `"'=a""b"`],
    ['acme', '"acme"'],
    ['a-1', '"a-1"'],
    ['', '""'],
  ])('csvText(%j) is %s', (input, expected) => {
    expect(csvText(input)).toBe(expected);
  });
});
