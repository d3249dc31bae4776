/** Test PKI: a CA, server and client certificates signed by it, and atomic file replacement. */
import { randomBytes, X509Certificate } from 'node:crypto';
import { rename, writeFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { join } from 'node:path';
import { generate } from 'selfsigned';

/** A certificate and its private key, PEM. */
export interface Pem {
  cert: string;
  key: string;
}

/** Paths of a certificate and key written to disk. */
export interface PemFiles {
  cert: string;
  key: string;
}

/** A self-signed ECDSA CA that can sign the other test certificates. */
export async function makeCa(commonName = 'queen-edge test CA'): Promise<Pem> {
  const pems = await generate([{ name: 'commonName', value: commonName }], {
    keyType: 'ec',
    algorithm: 'sha256',
    extensions: [
      { name: 'basicConstraints', cA: true, critical: true },
      { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
    ],
  });
  return { cert: pems.cert, key: pems.private };
}

/** An end-entity ECDSA certificate with CN `commonName` and the given usage, signed by `ca`. */
async function signedCert(ca: Pem, commonName: string, usage: { serverAuth?: boolean; clientAuth?: boolean }, altNames?: string[]): Promise<Pem> {
  const pems = await generate([{ name: 'commonName', value: commonName }], {
    keyType: 'ec',
    algorithm: 'sha256',
    ca,
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, critical: true },
      { name: 'extKeyUsage', ...usage },
      ...(altNames
        ? [{ name: 'subjectAltName' as const, altNames: altNames.map((n) => (isIP(n) ? { type: 7 as const, ip: n } : { type: 2 as const, value: n })) }]
        : []),
    ],
  });
  return { cert: pems.cert, key: pems.private };
}

/** A server certificate for `names` (DNS names or IPs; the first is the CN), signed by `ca`. */
export function makeServerCert(ca: Pem, names: string[]): Promise<Pem> {
  return signedCert(ca, names[0]!, { serverAuth: true }, names);
}

/** A client certificate with CN `commonName`, signed by `ca`. */
export function makeClientCert(ca: Pem, commonName: string): Promise<Pem> {
  return signedCert(ca, commonName, { clientAuth: true });
}

/** Replaces `path` the way certbot and cert-manager do: write a temporary file, then rename it over. */
export async function replaceFile(path: string, content: string): Promise<void> {
  const tmp = `${path}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(tmp, content);
  await rename(tmp, path);
}

/** Writes `<dir>/<name>.crt` and `<dir>/<name>.key` (each by rename) and returns their paths. */
export async function writePem(dir: string, name: string, pem: Pem): Promise<PemFiles> {
  const files = { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
  await replaceFile(files.cert, pem.cert);
  await replaceFile(files.key, pem.key);
  return files;
}

/** SHA-256 fingerprint of a PEM certificate, as tls reports `fingerprint256`. */
export function fingerprint(certPem: string): string {
  return new X509Certificate(certPem).fingerprint256;
}
