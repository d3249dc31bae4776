/**
 * Public keys as configuration holds them (docs/tenancy.md, "Tenants with their own identity
 * provider"): inline, as PEM text or a JWK (JSON text), or, in the operator's file only, the path
 * of a PEM file. Paths are read once when the configuration is applied (start, reload; `validate`
 * checks them the same way), asynchronously, regular files only and at most KEY_FILE_MAX_BYTES,
 * and replaced by what they hold, so nothing later (the directory, an admin write) opens a file: a FIFO or a device named there cannot block or fill the
 * process. Tenant records written through the admin API hold their key inline; a path there is
 * refused.
 */
import { createPublicKey, type JsonWebKeyInput, type KeyObject } from 'node:crypto';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import type { RawConfig, RawTenantAuth } from '../config/schema.js';
import { ConfigError } from '../config/load.js';
import { eachTenant, rememberTenantIds, tenantIds } from '../config/tenant-ids.js';
import { jwksUrlRefusal, type TenantJwksAllowances } from './jwks-url.js';

/** The largest key file read: a PEM certificate chain is a few KiB. */
export const KEY_FILE_MAX_BYTES = 64 * 1024;

/** True when `value` is the key itself (PEM text or a JWK), not a path. */
export function isInlineKey(value: string): boolean {
  const text = value.trimStart();
  return text.startsWith('-----BEGIN') || text.startsWith('{');
}

/** The key `text` holds: a JWK when it starts with `{`, else PEM (SPKI or a certificate); throws when it is neither. */
export function parsePublicKey(text: string): KeyObject {
  return text.startsWith('{') ? createPublicKey({ key: JSON.parse(text) as JsonWebKeyInput['key'], format: 'jwk' }) : createPublicKey(text);
}

/** The text of the key file at `path`; throws an Error saying why not (not a regular file, too large, unreadable). */
export async function readKeyFile(path: string): Promise<string> {
  // O_NONBLOCK: opening a FIFO with no writer returns at once, and fstat then tells it is no file.
  const file = await open(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    const st = await file.stat();
    if (!st.isFile()) throw new Error(`${path}: not a regular file`);
    if (st.size > KEY_FILE_MAX_BYTES) throw new Error(`${path}: ${st.size} bytes, more than a key file holds (${KEY_FILE_MAX_BYTES})`);
    const buf = Buffer.alloc(KEY_FILE_MAX_BYTES + 1);
    const { bytesRead } = await file.read(buf, 0, buf.length, 0);
    if (bytesRead > KEY_FILE_MAX_BYTES) throw new Error(`${path}: grew past ${KEY_FILE_MAX_BYTES} bytes while read`);
    return buf.subarray(0, bytesRead).toString('utf8');
  } finally {
    await file.close();
  }
}

/**
 * `config` with every `publicKey` path (the global one, and the file's tenants') replaced by the
 * file's text; a ConfigError listing each file that could not be read by its path.
 */
export async function inlineKeyFiles(config: RawConfig): Promise<RawConfig> {
  const problems: string[] = [];
  const inline = async (where: string, value: string | null): Promise<string | null> => {
    if (value === null || isInlineKey(value)) return value;
    try {
      return await readKeyFile(value);
    } catch (err) {
      problems.push(`${where}: ${(err as Error).message}`);
      return value;
    }
  };
  const publicKey = await inline('auth.publicKey', config.auth.publicKey);
  // Only the tenants naming a key file are copied: the tenant map is shared otherwise (100,000
  // tenants, a few with files), and looked through in slices.
  const named: string[] = [];
  await eachTenant(config.tenants, (id, t) => {
    if (t.auth?.publicKey != null && !isInlineKey(t.auth.publicKey)) named.push(id);
  });
  let tenants = config.tenants;
  if (named.length > 0) {
    tenants = { ...config.tenants };
    rememberTenantIds(tenants, tenantIds(config.tenants));
    for (const id of named) {
      const t = config.tenants[id]!;
      tenants[id] = { ...t, auth: { ...t.auth!, publicKey: await inline(`tenants.${id}.auth.publicKey`, t.auth!.publicKey) } };
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return { ...config, auth: { ...config.auth, publicKey }, tenants };
}

/**
 * Problems of a tenant record's own `auth` that the schema cannot see: a key named by path, and a
 * `jwksUrl` the edge would refuse to fetch (jwks-url.ts) under the operator's `auth.jwks`.
 */
export function recordAuthProblems(auth: Pick<RawTenantAuth, 'publicKey' | 'jwksUrl'> | null, allowances: TenantJwksAllowances | undefined): string[] {
  const problems: string[] = [];
  if (auth?.publicKey != null && !isInlineKey(auth.publicKey)) {
    problems.push('auth.publicKey: a tenant record holds its key itself (PEM text, or a JWK as JSON); a file path is read only from the configuration file');
  }
  const refusal = auth?.jwksUrl == null || allowances === undefined ? null : jwksUrlRefusal(auth.jwksUrl, { tenant: allowances });
  if (refusal !== null) problems.push(`auth.jwksUrl: ${refusal}`);
  return problems;
}
