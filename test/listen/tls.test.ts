import { X509Certificate } from 'node:crypto';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SecureContextOptions } from 'node:tls';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { configSchema, type RawConfig } from '../../src/config/schema.js';
import { buildSniTable, CertificateSet, certificateProblems, lookupServername } from '../../src/listen/tls.js';
import { silentLogger } from '../../src/observability/log.js';
import { fingerprint, makeCa, makeServerCert, replaceFile, writePem, type Pem } from '../helpers/certs.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';

function httpsConfig(over: Partial<RawConfig['server']['https']> = {}): RawConfig['server']['https'] {
  return configSchema.shape.server.parse({ https: over }).https;
}

describe('lookupServername', () => {
  const table = buildSniTable([
    ['api.example.com', 'exact'],
    ['*.example.com', 'wild'],
    ['API.other.test', 'upper'],
    ['api.other.test', 'second'],
  ]);
  it.each([
    ['api.example.com', 'exact'],
    ['www.example.com', 'wild'],
    ['WWW.Example.COM', 'wild'],
    ['a.b.example.com', undefined], // a wildcard covers one label only
    ['example.com', undefined], // nor the bare domain
    ['api.other.test', 'upper'], // names are case-insensitive; the first entry wins
    ['unknown.test', undefined],
    ['localhost', undefined],
  ])('%s -> %s', (name, expected) => {
    expect(lookupServername(table, name)).toBe(expected);
  });
});

describe('CertificateSet', () => {
  let dir: string;
  let ca: Pem;
  const sets: CertificateSet[] = [];
  beforeAll(async () => {
    ca = await makeCa();
  });
  afterEach(async () => {
    for (const s of sets.splice(0)) s.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('generates an ECDSA P-256 certificate for localhost, 127.0.0.1 and ::1 when none is configured, and warns', async () => {
    const { log, lines } = capturingLogger();
    const set = await CertificateSet.load(httpsConfig(), { log });
    const x = new X509Certificate(set.contextOptions().cert as Buffer);
    expect(x.subjectAltName).toBe('DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1');
    expect(x.publicKey.asymmetricKeyType).toBe('ec');
    expect(x.publicKey.asymmetricKeyDetails?.namedCurve).toBe('prime256v1');
    expect(set.contextOptions().minVersion).toBe('TLSv1.2');
    expect(lines.some((l) => l.level === 40 && l.msg.includes('self-signed'))).toBe(true);
  });

  it('rejects at start with the config path when a file is missing or the pair does not match', async () => {
    dir = await mkdtemp(join(tmpdir(), 'qe-tls-'));
    const a = await writePem(dir, 'a', await makeServerCert(ca, ['a.test']));
    const b = await writePem(dir, 'b', await makeServerCert(ca, ['b.test']));
    await expect(CertificateSet.load(httpsConfig({ cert: join(dir, 'nope.crt'), key: a.key }), { log: silentLogger() })).rejects.toThrow(
      /^server\.https: cannot use .*nope\.crt.*ENOENT/,
    );
    await expect(
      CertificateSet.load(httpsConfig({ cert: a.cert, key: a.key, sni: [{ servername: 'b.test', cert: b.cert, key: a.key }] }), { log: silentLogger() }),
    ).rejects.toThrow(/^server\.https\.sni\[0\]: .*key values mismatch/);
    await writeFile(join(dir, 'ca.pem'), 'not a certificate');
    await expect(CertificateSet.load(httpsConfig({ cert: a.cert, key: a.key, clientCa: join(dir, 'ca.pem') }), { log: silentLogger() })).rejects.toThrow(
      /^server\.https\.clientCa: .*no PEM certificate/,
    );
  });

  it('certificateProblems: each file by its path (missing, not PEM, a key of another certificate, a bad CA bundle), nothing generated', async () => {
    dir = await mkdtemp(join(tmpdir(), 'qe-tls-'));
    const a = await writePem(dir, 'a', await makeServerCert(ca, ['a.test']));
    const b = await writePem(dir, 'b', await makeServerCert(ca, ['b.test']));
    await writeFile(join(dir, 'ca.pem'), 'not a certificate');
    const { problems, warnings } = await certificateProblems(
      httpsConfig({ cert: a.cert, key: b.key, sni: [{ servername: 'b.test', cert: join(dir, 'nope.crt'), key: b.key }], clientCa: join(dir, 'ca.pem') }),
    );
    expect(problems).toEqual([
      expect.stringMatching(new RegExp(`^server\\.https\\.key: ${b.key}: not the PEM private key of server\\.https\\.cert \\(.*key values mismatch`)),
      `server.https.sni[0].cert: ${join(dir, 'nope.crt')}: no such file`,
      `server.https.clientCa: ${join(dir, 'ca.pem')}: not a PEM certificate bundle`,
    ]);
    expect(warnings).toEqual([]);
    expect(await certificateProblems(httpsConfig({ cert: a.cert, key: a.key }))).toEqual({ problems: [], warnings: [] });
    // HTTPS off: its files are not read, as the start does not read them.
    expect((await certificateProblems(httpsConfig({ port: null, cert: join(dir, 'nope.crt'), key: b.key }))).problems).toEqual([]);
  });

  it('resolves relative paths against baseDir', async () => {
    dir = await mkdtemp(join(tmpdir(), 'qe-tls-'));
    const pem = await makeServerCert(ca, ['a.test']);
    await writePem(dir, 'a', pem);
    const set = await CertificateSet.load(httpsConfig({ cert: 'a.crt', key: 'a.key' }), { log: silentLogger(), baseDir: dir });
    expect(fingerprint(String(set.contextOptions().cert))).toBe(fingerprint(pem.cert));
  });

  it('picks up an in-place change behind a symlink, which fs.watch on the link directory misses, through the stat poll', async () => {
    dir = await mkdtemp(join(tmpdir(), 'qe-tls-'));
    const live = join(dir, 'live');
    const archive = join(dir, 'archive');
    await mkdir(live);
    await mkdir(archive);
    const v1 = await makeServerCert(ca, ['a.test']);
    const v2 = await makeServerCert(ca, ['a.test']);
    await writePem(archive, 'a', v1);
    await symlink(join(archive, 'a.crt'), join(live, 'a.crt'));
    await symlink(join(archive, 'a.key'), join(live, 'a.key'));
    const set = await CertificateSet.load(httpsConfig({ cert: join(live, 'a.crt'), key: join(live, 'a.key') }), { log: silentLogger(), pollIntervalMs: 100 });
    sets.push(set);
    const applied: SecureContextOptions[] = [];
    set.watch((o) => applied.push(o));
    // Time is the subject: watch() records the files' baseline stats asynchronously and exposes no
    // signal for it; written before that, the new pair would become the baseline and never be seen.
    await new Promise((r) => setTimeout(r, 150));
    // Same size, so only the mtime and content tell the change; write key first so the pair is never mixed for long.
    await writeFile(join(archive, 'a.key'), v2.key);
    await writeFile(join(archive, 'a.crt'), v2.cert);
    await waitFor(() => applied.some((o) => fingerprint(String(o.cert)) === fingerprint(v2.cert)), 5000, 'the replaced certificate applied');
    expect(fingerprint(String(set.contextOptions().cert))).toBe(fingerprint(v2.cert));
  });

  it('serves a replaced SNI pair to the next handshake for that name', async () => {
    dir = await mkdtemp(join(tmpdir(), 'qe-tls-'));
    const def = await writePem(dir, 'default', await makeServerCert(ca, ['default.test']));
    const a = await writePem(dir, 'a', await makeServerCert(ca, ['a.test']));
    const set = await CertificateSet.load(httpsConfig({ ...def, sni: [{ servername: 'a.test', ...a }] }), { log: silentLogger(), debounceMs: 50 });
    sets.push(set);
    const sni = set.sniCallback()!;
    const contextFor = (name: string): Promise<unknown> => new Promise((r) => sni(name, (_err, ctx) => r(ctx)));
    const before = await contextFor('a.test');
    expect(before).toBeDefined();
    expect(await contextFor('other.test')).toBeUndefined();
    let applied = 0;
    set.watch(() => applied++);
    await writePem(dir, 'a', await makeServerCert(ca, ['a.test']));
    await waitFor(() => applied === 1, 5000, 'the replaced SNI pair applied');
    expect(await contextFor('a.test')).not.toBe(before);
  });

  it('keeps the old client CA when the new bundle is not a certificate, and takes a valid one', async () => {
    dir = await mkdtemp(join(tmpdir(), 'qe-tls-'));
    const files = await writePem(dir, 'a', await makeServerCert(ca, ['a.test']));
    const caPath = join(dir, 'ca.pem');
    await replaceFile(caPath, ca.cert);
    const { log, lines } = capturingLogger();
    const set = await CertificateSet.load(httpsConfig({ ...files, clientCa: caPath }), { log, debounceMs: 50 });
    sets.push(set);
    const applied: SecureContextOptions[] = [];
    set.watch((o) => applied.push(o));
    await replaceFile(caPath, 'garbage');
    await waitFor(() => lines.some((l) => l.level === 50 && l.msg.startsWith('server.https.clientCa')), 5000, 'the error log line rejecting the bad client CA');
    expect(applied).toHaveLength(0);
    expect(String(set.contextOptions().ca)).toBe(ca.cert);
    const other = await makeCa('other CA');
    await replaceFile(caPath, other.cert);
    await waitFor(() => applied.length === 1, 5000, 'the valid client CA applied');
    expect(String(applied[0]!.ca)).toBe(other.cert);
  });
});
