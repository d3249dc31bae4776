/**
 * The checks a start (and a reload) makes before serving, and `queen-edge validate` makes without
 * serving, beyond the file itself: every certificate and key file the configuration names is read
 * and parsed by the loader that will use it, and the start's warnings are listed. Problems are
 * `path: file: what`, like the file's own (docs/reference.md, "validate").
 */
import { isInlineKey } from './auth/key-files.js';
import { loadPublicKey } from './auth/jwt.js';
import { createMinter } from './auth/mint.js';
import type { RawConfig } from './config/schema.js';
import { startWarnings } from './config/warnings.js';
import { eachTenant } from './config/tenant-ids.js';
import { certificateProblems, SELF_SIGNED_WARNING } from './listen/tls.js';

export interface FileChecks {
  readonly problems: string[];
  readonly warnings: string[];
}

/** What the public-key loader says, without the path it repeats (the problem names it already); an inline key is never echoed. */
function keyProblem(label: string, ref: string, err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  const why =
    e.code === 'ENOENT' ? 'no such file' : e.code === 'EACCES' ? 'permission denied' : e.message.replace(`auth.publicKey ${ref}: `, '').replace(`${ref}: `, '');
  return isInlineKey(ref) ? `${label}: ${why}` : `${label}: ${ref}: ${why}`;
}

export async function checkFiles(config: RawConfig): Promise<FileChecks> {
  const { problems, warnings } = await certificateProblems(config.server.https);
  const keys: [string, string][] = [];
  if (config.auth.publicKey !== null) keys.push(['auth.publicKey', config.auth.publicKey]);
  // In slices: a reload checks 100,000 tenants on the event loop.
  await eachTenant(config.tenants, (id, tenant) => {
    const key = tenant.auth?.publicKey;
    if (key) keys.push([`tenants.${id}.auth.publicKey`, key]);
  });
  for (const [label, path] of keys) {
    try {
      await loadPublicKey(path);
    } catch (err) {
      problems.push(keyProblem(label, path, err));
    }
  }
  if (config.upstreamIdentity.mode === 'mint') {
    const mint = config.upstreamIdentity.mint;
    try {
      await createMinter(mint, {});
    } catch (err) {
      const e = err as NodeJS.ErrnoException;
      problems.push(
        e.code === 'ENOENT'
          ? `upstreamIdentity.mint.privateKey: ${mint.privateKey}: no such file`
          : `upstreamIdentity.mint: ${e.message.replace(/^upstreamIdentity\.mint: /, '')}`,
      );
    }
  }
  const selfSigned = config.server.https.port !== null && config.server.https.cert === null;
  return { problems, warnings: [...warnings, ...(selfSigned ? [SELF_SIGNED_WARNING] : []), ...startWarnings(config)] };
}
