/**
 * The admin API's tenant API keys (docs/api-keys.md): create (the key is in that answer only),
 * list (never the secret), revoke. Keys declared in the configuration file are listed with
 * `source: "file"` and are revoked by removing them there.
 */
import { z } from 'zod';
import { ROLE_NAMES } from '../config/schema.js';
import { EdgeError, edgeError, type AnyErrorCode } from '../errors.js';
import { isKeyId, mintKey } from '../keys/format.js';
import type { ApiKeyRecord, ApiKeyStore, ListedKey } from '../keys/store.js';
import type { ApiKeyVerifier } from '../keys/verifier.js';
import { StoreUnavailable } from '../keys/store-keys.js';
import type { Tenant } from '../tenants/model.js';

export interface KeyAdminDeps {
  readonly store: ApiKeyStore;
  readonly verifier: ApiKeyVerifier;
  readonly tenant: (id: string) => Tenant | undefined;
  readonly clock: () => number;
}

export type KeyReply = { readonly status: number; readonly body?: unknown };

/** Keys a tenant may hold at once: enough to rotate every service's key, a bound on the list. */
export const MAX_KEYS_PER_TENANT = 100;

/** A key's name as shown in lists and terminals: printable text only (no control or format characters). */
export const KEY_NAME = z
  .string()
  .min(1)
  .max(200)
  .regex(/^[^\p{Cc}\p{Cf}]+$/u, 'printable characters only');

const createRequest = z.strictObject({
  name: KEY_NAME,
  roles: z
    .array(z.enum(ROLE_NAMES))
    .min(1)
    .refine((r) => new Set(r).size === r.length, 'roles: each at most once'),
  expiresAt: z.iso.datetime({ offset: true }).nullable().optional(),
});

function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

function view(k: ListedKey, source: 'file' | 'admin'): Record<string, unknown> {
  return { id: k.id, name: k.name, roles: k.roles, createdAt: iso(k.createdAt), lastUsedAt: iso(k.lastUsedAt), expiresAt: iso(k.expiresAt), source };
}

/** A key write's outcome, or `503 store_unavailable` when the durable store could not take it. */
async function written<T>(write: Promise<T>): Promise<T | EdgeError<AnyErrorCode>> {
  try {
    return await write;
  } catch (err) {
    if (err instanceof StoreUnavailable) return edgeError('store_unavailable');
    throw err;
  }
}

function tenantOf(d: KeyAdminDeps, id: string): Tenant | EdgeError<AnyErrorCode> {
  return d.tenant(id) ?? edgeError('not_found', `no tenant "${id}"`);
}

/** `POST /admin/v1/tenants/:id/keys`: 201 with the key, shown this once. */
export async function createKey(d: KeyAdminDeps, tenantId: string, body: unknown, actor: string): Promise<KeyReply | EdgeError<AnyErrorCode>> {
  const t = tenantOf(d, tenantId);
  if (t instanceof EdgeError) return t;
  const parsed = createRequest.safeParse(body);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`);
    return edgeError('invalid_request', `invalid key request: ${problems.join('; ')}`, { problems });
  }
  const now = d.clock();
  const expiresAt = parsed.data.expiresAt ? Date.parse(parsed.data.expiresAt) : null;
  if (expiresAt !== null && expiresAt <= now) return edgeError('invalid_request', 'expiresAt: must be in the future');
  const { id, key, hash } = mintKey();
  const record: ApiKeyRecord = { id, tenant: t.id, name: parsed.data.name, roles: parsed.data.roles, createdAt: now, expiresAt, hash };
  const added = await written(d.store.add(record, MAX_KEYS_PER_TENANT, actor));
  if (added instanceof EdgeError) return added;
  if (!added) {
    return edgeError('conflict', `tenant "${t.id}" already has ${MAX_KEYS_PER_TENANT} keys: revoke one first`);
  }
  return { status: 201, body: { id, key, name: record.name, roles: record.roles, createdAt: iso(now), expiresAt: iso(expiresAt) } };
}

/** `GET /admin/v1/tenants/:id/keys`: the file's keys, then the admin API's by creation; never a secret or a hash. */
export async function listKeys(d: KeyAdminDeps, tenantId: string): Promise<KeyReply | EdgeError<AnyErrorCode>> {
  const t = tenantOf(d, tenantId);
  if (t instanceof EdgeError) return t;
  const file = d.verifier.fileKeys(t.id).map((r) => view({ ...r, lastUsedAt: null }, 'file'));
  const stored = (await d.store.list(t.id)).map((k) => view(k, 'admin'));
  return { status: 200, body: { keys: [...file, ...stored] } };
}

/**
 * A deleted tenant's keys are revoked with it: a tenant created later under its id starts with
 * none. Their ids, or the refusal when the store could not take it: the caller says so, since
 * the instances' own retries (keys/lifetime.ts) live only as long as they do.
 */
export async function revokeTenantKeys(d: KeyAdminDeps, tenantId: string, actor: string): Promise<string[] | EdgeError<AnyErrorCode>> {
  return written(d.store.revokeAll(tenantId, undefined, actor));
}

/** `DELETE /admin/v1/tenants/:id/keys/:keyId`: 204; every instance refuses the key within a second. */
export async function revokeKey(d: KeyAdminDeps, tenantId: string, keyId: string, actor: string): Promise<KeyReply | EdgeError<AnyErrorCode>> {
  // Never echoed: what was given may be a whole key pasted in place of its id.
  if (!isKeyId(keyId))
    return edgeError(
      'not_found',
      keyId.startsWith('qe_') ? 'that is a key, not a key id: revoke it by its id (the 12 characters after "qe_")' : 'no such key id',
    );
  if (d.verifier.fileKeys(tenantId).some((r) => r.id === keyId)) {
    return edgeError('conflict', `key "${keyId}" is declared in the configuration file: remove it there and reload`);
  }
  const revoked = await written(d.store.revoke(tenantId, keyId, actor));
  if (revoked instanceof EdgeError) return revoked;
  return revoked ? { status: 204 } : edgeError('not_found', `no key "${keyId}" for tenant "${tenantId}"`);
}
