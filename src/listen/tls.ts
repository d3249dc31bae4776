/**
 * The HTTPS listener's certificates (docs/architecture.md): the default pair from PEM files or a generated
 * self-signed one, SNI pairs chosen by server name, the client CA, and hot reload when the files
 * change on disk. Reload is per slot: a broken new pair is logged and the slot keeps its old one.
 */
import { X509Certificate } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { isIP } from 'node:net';
import { dirname, resolve } from 'node:path';
import { createSecureContext, type SecureContext, type SecureContextOptions } from 'node:tls';
import { generate } from 'selfsigned';
import type { RawConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';

type HttpsConfig = RawConfig['server']['https'];

/** Oldest TLS version offered (docs/architecture.md). Part of every context, since setSecureContext() resets it. */
export const MIN_TLS_VERSION = 'TLSv1.2';

/** Names the generated certificate covers when no certificate is configured. */
export const SELF_SIGNED_NAMES: readonly string[] = ['localhost', '127.0.0.1', '::1'];

/** What Node's SNICallback receives; no context means "use the default". */
export type SniCallback = (servername: string, cb: (err: Error | null, ctx?: SecureContext) => void) => void;

/** Server-name lookup: exact names, and `*.suffix` wildcards keyed by suffix; all lower-case. */
export interface SniTable<T> {
  exact: ReadonlyMap<string, T>;
  wildcard: ReadonlyMap<string, T>;
}

/** Builds an SNI table from `[servername, value]` entries; the first entry for a name wins. */
export function buildSniTable<T>(entries: Iterable<readonly [string, T]>): SniTable<T> {
  const exact = new Map<string, T>();
  const wildcard = new Map<string, T>();
  for (const [servername, value] of entries) {
    const name = servername.toLowerCase();
    const [map, key] = name.startsWith('*.') ? [wildcard, name.slice(2)] : [exact, name];
    if (!map.has(key)) map.set(key, value);
  }
  return { exact, wildcard };
}

/** The entry for a TLS server name: exact match first, then a wildcard for one label (RFC 6125 §6.4.3). */
export function lookupServername<T>(table: SniTable<T>, servername: string): T | undefined {
  const name = servername.toLowerCase();
  const exact = table.exact.get(name);
  if (exact !== undefined) return exact;
  const dot = name.indexOf('.');
  return dot > 0 ? table.wildcard.get(name.slice(dot + 1)) : undefined;
}

/** A certificate the listener serves or trusts, for the expiry gauge (docs/operating.md). */
export interface CertificateExpiry {
  /** Its config path: `server.https`, `server.https.sni[0]`, `server.https.clientCa`. */
  readonly certificate: string;
  /** The names it covers (subjectAltName entries, else the subject's CN), comma-separated. */
  readonly names: string;
  /** Its notAfter, epoch milliseconds. */
  readonly notAfterMs: number;
}

/** Tunables of the certificate watcher. */
export interface CertificateOptions {
  log: Logger;
  /** Directory that relative certificate paths are resolved against; default the working directory. */
  baseDir?: string;
  /** Period of the stat poll that catches what fs.watch misses (symlink targets elsewhere, network file systems). */
  pollIntervalMs?: number;
  /** Quiet time after a file event before reloading: a cert and its key are written one after the other. */
  debounceMs?: number;
}

interface KeyPair {
  cert: Buffer;
  key: Buffer;
}

/** One reloadable unit: the default pair, one SNI pair, or the client CA bundle. */
interface Slot {
  /** Config path for log lines, e.g. `server.https.sni[1]`. */
  label: string;
  servername: string | null;
  /** Absolute file paths: [cert, key] for a pair, [ca] for the CA. */
  files: string[];
  /** Last good content, one buffer per file. */
  current: Buffer[];
  /** Last content refused, so an unrelated file event does not log the same failure again. */
  rejected: Buffer[] | null;
}

const DEFAULT_POLL_MS = 5000;
const DEFAULT_DEBOUNCE_MS = 250;
const PEM_CERT = /-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g;

/** The live certificates of the HTTPS listener; `watch()` keeps them in step with the files. */
export class CertificateSet {
  readonly #log: Logger;
  readonly #pollIntervalMs: number;
  readonly #debounceMs: number;
  /** null when the default pair was generated (nothing to watch). */
  readonly #defaultSlot: Slot | null;
  readonly #sniSlots: Slot[];
  readonly #caSlot: Slot | null;
  /** Used while #defaultSlot is null. */
  readonly #generated: KeyPair | null;
  #sni: SniTable<SecureContext>;
  #apply: ((options: SecureContextOptions) => void) | null = null;
  #watchers: FSWatcher[] = [];
  #poll: NodeJS.Timeout | null = null;
  #debounce: NodeJS.Timeout | null = null;
  #stats = new Map<string, string>();
  #reloading: Promise<void> | null = null;
  #again = false;

  private constructor(options: CertificateOptions, slots: { default: Slot | null; sni: Slot[]; ca: Slot | null }, generated: KeyPair | null) {
    this.#log = options.log;
    this.#pollIntervalMs = options.pollIntervalMs ?? DEFAULT_POLL_MS;
    this.#debounceMs = options.debounceMs ?? DEFAULT_DEBOUNCE_MS;
    this.#defaultSlot = slots.default;
    this.#sniSlots = slots.sni;
    this.#caSlot = slots.ca;
    this.#generated = generated;
    this.#sni = this.#buildSni();
  }

  /** Reads every configured file (a missing or broken one rejects with its config path), or generates the default pair. */
  static async load(https: HttpsConfig, options: CertificateOptions): Promise<CertificateSet> {
    const base = options.baseDir ?? process.cwd();
    const abs = (p: string): string => resolve(base, p);
    const initial = async (label: string, servername: string | null, files: string[], check: (c: Buffer[]) => void): Promise<Slot> => {
      let current: Buffer[];
      try {
        current = await Promise.all(files.map((f) => readFile(f)));
        check(current);
      } catch (err) {
        throw new Error(`${label}: cannot use ${files.join(' + ')}: ${(err as Error).message}`, { cause: err });
      }
      return { label, servername, files, current, rejected: null };
    };
    const pair = (c: Buffer[]): void => checkPair(c[0]!, c[1]!);
    const ca = https.clientCa === null ? null : await initial('server.https.clientCa', null, [abs(https.clientCa)], (c) => checkCaBundle(c[0]!));
    const def = https.cert === null || https.key === null ? null : await initial('server.https', null, [abs(https.cert), abs(https.key)], pair);
    const sni = await Promise.all(https.sni.map((e, i) => initial(`server.https.sni[${i}]`, e.servername, [abs(e.cert), abs(e.key)], pair)));
    let generated: KeyPair | null = null;
    if (def === null) {
      generated = await generateSelfSigned();
      options.log.warn({ names: SELF_SIGNED_NAMES }, SELF_SIGNED_WARNING);
    }
    const set = new CertificateSet(options, { default: def, sni, ca }, generated);
    for (const slot of set.#slots()) {
      const warning = slot === ca ? null : expired(slot.label, slot.current[0]!);
      if (warning !== null) options.log.warn(warning);
    }
    return set;
  }

  /** Whether clients are asked for a certificate (server.https.clientCa is set). */
  get requestCert(): boolean {
    return this.#caSlot !== null;
  }

  /** Options of the default secure context, for createSecureServer() and setSecureContext(). */
  contextOptions(): SecureContextOptions {
    const pair = this.#defaultSlot === null ? this.#generated! : { cert: this.#defaultSlot.current[0]!, key: this.#defaultSlot.current[1]! };
    return { cert: pair.cert, key: pair.key, ca: this.#caSlot?.current[0], minVersion: MIN_TLS_VERSION };
  }

  /**
   * The certificates in force (after any reload), read at scrape time: the default pair (generated
   * or from files), each SNI pair, and the earliest-expiring certificate of the client CA bundle.
   */
  expiries(): CertificateExpiry[] {
    const served = this.#defaultSlot === null ? [{ label: 'server.https', cert: this.#generated!.cert }] : [];
    for (const slot of this.#slots()) {
      if (slot !== this.#caSlot) served.push({ label: slot.label, cert: slot.current[0]! });
    }
    const out = served.map((c) => expiryOf(c.label, new X509Certificate(c.cert)));
    if (this.#caSlot !== null) {
      const bundle = (this.#caSlot.current[0]!.toString('latin1').match(PEM_CERT) ?? []).map((b) => new X509Certificate(b));
      const earliest = bundle.reduce((a, b) => (Date.parse(b.validTo) < Date.parse(a.validTo) ? b : a));
      out.push(expiryOf(this.#caSlot.label, earliest));
    }
    return out;
  }

  /** Node's SNICallback over the live SNI table, or undefined when no SNI entry is configured. */
  sniCallback(): SniCallback | undefined {
    if (this.#sniSlots.length === 0) return undefined;
    return (servername, cb) => cb(null, lookupServername(this.#sni, servername));
  }

  /** Starts watching the files; `apply` gets the new default options after each change that took effect. */
  watch(apply: (options: SecureContextOptions) => void): void {
    this.#apply = apply;
    const files = this.#slots().flatMap((s) => s.files);
    if (files.length === 0) return;
    // Watch directories, not files: a rename-replacement (certbot, cert-manager's symlink swap) gives the
    // path a new inode, and a watch on the old inode would go quiet.
    for (const dir of new Set(files.map((f) => dirname(f)))) {
      try {
        const w = watch(dir, { persistent: false }, () => this.#schedule());
        w.on('error', (err) => this.#log.warn({ err, dir }, 'certificate directory watch failed; relying on the stat poll'));
        this.#watchers.push(w);
      } catch (err) {
        this.#log.warn({ err, dir }, 'cannot watch certificate directory; relying on the stat poll');
      }
    }
    void this.#statChanged(files);
    this.#poll = setInterval(() => {
      void this.#statChanged(files).then((changed) => {
        if (changed) void this.reload();
      });
    }, this.#pollIntervalMs);
    this.#poll.unref();
  }

  /** Re-reads the files and applies what changed and is valid; concurrent calls coalesce. */
  reload(): Promise<void> {
    if (this.#reloading !== null) {
      this.#again = true;
      return this.#reloading;
    }
    this.#reloading = this.#reloadOnce()
      .catch((err: unknown) => {
        this.#log.error({ err }, 'TLS certificate reload failed');
      })
      .finally(() => {
        this.#reloading = null;
        if (this.#again) {
          this.#again = false;
          void this.reload();
        }
      });
    return this.#reloading;
  }

  /** Stops watching. */
  close(): void {
    for (const w of this.#watchers) w.close();
    this.#watchers = [];
    if (this.#poll !== null) clearInterval(this.#poll);
    if (this.#debounce !== null) clearTimeout(this.#debounce);
    this.#poll = null;
    this.#debounce = null;
    this.#apply = null;
  }

  #slots(): Slot[] {
    const out = [...this.#sniSlots];
    if (this.#defaultSlot !== null) out.unshift(this.#defaultSlot);
    if (this.#caSlot !== null) out.push(this.#caSlot);
    return out;
  }

  #schedule(): void {
    if (this.#apply === null) return;
    if (this.#debounce !== null) clearTimeout(this.#debounce);
    this.#debounce = setTimeout(() => {
      this.#debounce = null;
      void this.reload();
    }, this.#debounceMs);
    this.#debounce.unref();
  }

  /** Whether any file's identity (inode, size, mtime; symlinks followed) changed since the last poll. */
  async #statChanged(files: string[]): Promise<boolean> {
    let changed = false;
    await Promise.all(
      files.map(async (f) => {
        const sig = await stat(f).then(
          (s) => `${s.ino}:${s.size}:${s.mtimeMs}`,
          () => 'missing',
        );
        const before = this.#stats.get(f);
        this.#stats.set(f, sig);
        if (before !== undefined && before !== sig) changed = true;
      }),
    );
    return changed;
  }

  async #reloadOnce(): Promise<void> {
    const updated: Slot[] = [];
    for (const slot of this.#slots()) {
      let next: Buffer[];
      try {
        next = await Promise.all(slot.files.map((f) => readFile(f)));
      } catch (err) {
        // Between the writes of a non-atomic replacement; the next event or poll retries.
        this.#log.warn({ err, files: slot.files }, `${slot.label}: cannot read certificate files; keeping the current ones`);
        continue;
      }
      if (sameContent(next, slot.current) || (slot.rejected !== null && sameContent(next, slot.rejected))) continue;
      try {
        if (slot === this.#caSlot) checkCaBundle(next[0]!);
        else checkPair(next[0]!, next[1]!);
      } catch (err) {
        slot.rejected = next;
        this.#log.error({ err, files: slot.files }, `${slot.label}: new certificate files are unusable; keeping the current ones`);
        continue;
      }
      slot.current = next;
      slot.rejected = null;
      updated.push(slot);
    }
    if (updated.length === 0 || this.#apply === null) return;
    this.#sni = this.#buildSni();
    this.#apply(this.contextOptions());
    this.#log.info({ certificates: updated.map((s) => describe(s)) }, 'TLS certificates reloaded');
  }

  /** SNI contexts carry the client CA too: after an SNI switch, OpenSSL verifies against the chosen context's store. */
  #buildSni(): SniTable<SecureContext> {
    const ca = this.#caSlot?.current[0];
    return buildSniTable(
      this.#sniSlots.map((s) => [s.servername!, createSecureContext({ cert: s.current[0], key: s.current[1], ca, minVersion: MIN_TLS_VERSION })] as const),
    );
  }
}

/** The warning the start logs when it generates the certificate. */
export const SELF_SIGNED_WARNING = 'no server.https.cert configured: serving a generated self-signed certificate that clients will not trust';

/** What went wrong reading a file, in a few words (the path is named by the caller). */
function readFailure(err: NodeJS.ErrnoException): string {
  if (err.code === 'ENOENT') return 'no such file';
  if (err.code === 'EACCES') return 'permission denied';
  if (err.code === 'EISDIR') return 'a directory, not a file';
  return err.message;
}

/**
 * Every problem of the certificate files `server.https` names, read and parsed as the listener reads
 * them (nothing is generated): each as `path: file: what`, for `queen-edge validate` and the checks
 * before a start or a reload; expired certificates are warnings. Nothing when HTTPS is off.
 */
export async function certificateProblems(https: HttpsConfig, baseDir = process.cwd()): Promise<{ problems: string[]; warnings: string[] }> {
  const problems: string[] = [];
  const warnings: string[] = [];
  if (https.port === null) return { problems, warnings };
  const read = async (label: string, file: string): Promise<Buffer | null> => {
    const abs = resolve(baseDir, file);
    try {
      return await readFile(abs);
    } catch (err) {
      problems.push(`${label}: ${abs}: ${readFailure(err as NodeJS.ErrnoException)}`);
      return null;
    }
  };
  const pair = async (label: string, certFile: string, keyFile: string): Promise<void> => {
    // One after the other: the problems come in the same order on every run (cert, then key).
    const cert = await read(`${label}.cert`, certFile);
    const key = await read(`${label}.key`, keyFile);
    if (cert !== null) {
      try {
        checkCaBundle(cert);
      } catch {
        problems.push(`${label}.cert: ${resolve(baseDir, certFile)}: not a PEM certificate`);
        return;
      }
    }
    const warning = cert === null ? null : expired(`${label}.cert`, cert);
    if (warning !== null) warnings.push(warning);
    if (cert === null || key === null) return;
    try {
      checkPair(cert, key);
    } catch (err) {
      problems.push(`${label}.key: ${resolve(baseDir, keyFile)}: not the PEM private key of ${label}.cert (${(err as Error).message})`);
    }
  };
  if (https.cert !== null && https.key !== null) await pair('server.https', https.cert, https.key);
  for (const [i, e] of https.sni.entries()) await pair(`server.https.sni[${i}]`, e.cert, e.key);
  if (https.clientCa !== null) {
    const ca = await read('server.https.clientCa', https.clientCa);
    if (ca !== null) {
      try {
        checkCaBundle(ca);
      } catch {
        problems.push(`server.https.clientCa: ${resolve(baseDir, https.clientCa)}: not a PEM certificate bundle`);
      }
    }
  }
  return { problems, warnings };
}

/** Throws unless cert and key parse and belong together. */
function checkPair(cert: Buffer, key: Buffer): void {
  createSecureContext({ cert, key, minVersion: MIN_TLS_VERSION });
}

/** Throws unless the bundle holds at least one parsable certificate (OpenSSL silently accepts garbage as a CA). */
function checkCaBundle(pem: Buffer): void {
  const blocks = pem.toString('latin1').match(PEM_CERT);
  if (blocks === null) throw new Error('no PEM certificate found');
  for (const block of blocks) new X509Certificate(block);
}

function sameContent(a: Buffer[], b: Buffer[]): boolean {
  return a.length === b.length && a.every((buf, i) => buf.equals(b[i]!));
}

function describe(slot: Slot): Record<string, string> {
  const x = new X509Certificate(slot.current[0]!);
  return { slot: slot.label, subject: x.subject, validTo: x.validTo, fingerprint256: x.fingerprint256 };
}

function expiryOf(certificate: string, x: X509Certificate): CertificateExpiry {
  // `DNS:a.example, IP Address:127.0.0.1`: the names without their kind.
  const alt = x.subjectAltName?.split(', ').map((n) => n.slice(n.indexOf(':') + 1)) ?? [];
  const names = alt.length > 0 ? alt : (/^CN=(.*)$/m.exec(x.subject)?.slice(1) ?? []);
  return { certificate, names: names.join(','), notAfterMs: Date.parse(x.validTo) };
}

/** `label: certificate has expired (date)`, or null while it is valid. */
function expired(label: string, cert: Buffer): string | null {
  const x = new X509Certificate(cert);
  return Date.parse(x.validTo) < Date.now() ? `${label}: certificate has expired (${x.subject}, valid to ${x.validTo})` : null;
}

/** An ECDSA P-256 certificate for SELF_SIGNED_NAMES, valid for a year. */
async function generateSelfSigned(): Promise<KeyPair> {
  const pems = await generate([{ name: 'commonName', value: 'localhost' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', serverAuth: true },
      { name: 'subjectAltName', altNames: SELF_SIGNED_NAMES.map((n) => (isIP(n) ? { type: 7 as const, ip: n } : { type: 2 as const, value: n })) },
    ],
  });
  return { cert: Buffer.from(pems.cert), key: Buffer.from(pems.private) };
}
