/** Calls to the admin listener of a test edge, and the admin CLI against it (test helper). */
import { PassThrough } from 'node:stream';
import { request } from 'undici';
import { runAdminCli } from '../../src/admin/cli-commands.js';
import { readReply, type EdgeHarness } from '../helpers/edge.js';

export const ADMIN_TOKEN = 'admin-token-for-tests-0123456789';

/** One admin API request; `token: null` sends no Authorization header. */
export async function admin(
  h: EdgeHarness,
  method: 'GET' | 'PUT' | 'POST' | 'DELETE',
  path: string,
  opts: { body?: unknown; token?: string | null } = {},
): Promise<{ status: number; json: any; text: string; headers: Record<string, unknown> }> {
  const token = opts.token === undefined ? ADMIN_TOKEN : opts.token;
  const headers: Record<string, string> = {};
  if (token !== null) headers.authorization = `Bearer ${token}`;
  let body: string | undefined;
  if (opts.body !== undefined) {
    body = typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
    headers['content-type'] = 'application/json';
  }
  const reply = await readReply(await request(`${h.adminUrl}${path}`, { method, headers, body }));
  return { ...reply, json: reply.json as any };
}

/** The value of an unlabelled sample on an instance's /metrics (NaN when absent). */
export async function metric(h: EdgeHarness, name: string): Promise<number> {
  const text = (await admin(h, 'GET', '/metrics', { token: null })).text;
  return Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
}

/**
 * Nothing counted and not yet in the usage store, no batch awaiting a retry: from here on no flush
 * of this instance can change what the store holds (until it counts more).
 */
export async function usageSettled(h: EdgeHarness): Promise<boolean> {
  return (await metric(h, 'queen_edge_metering_flush_lag_seconds')) === 0;
}

/** Runs an admin CLI command against `h`'s admin listener with the test token; its exit code and output. */
export async function runCli(h: EdgeHarness, ...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (c: Buffer) => (out += c.toString()));
  stderr.on('data', (c: Buffer) => (err += c.toString()));
  const code = await runAdminCli(argv, { stdout, stderr, env: { QUEEN_EDGE_ADMIN_URL: h.adminUrl, QUEEN_EDGE_ADMIN_TOKEN: ADMIN_TOKEN } });
  return { code, out, err };
}
