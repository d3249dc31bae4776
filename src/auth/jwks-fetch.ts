/**
 * One JWKS fetch, bounded (docs/security.md, "JWKS endpoints"): a document larger than
 * `auth.jwks.maxBytes` is refused from its Content-Length or as soon as that many bytes arrived,
 * before anything is parsed; redirects are not followed. A tenant's endpoint is held to more: https
 * only, and no loopback, private, link-local or other non-public address, whether the URL names
 * one or its host name resolves to one when connecting (the check is on the addresses connected
 * to, so a name that changes its answer between two lookups gains nothing), unless the operator
 * allows them (`auth.jwks.allowHttp`, `auth.jwks.allowPrivateAddresses`).
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { Agent, request } from 'undici';
import { isPublicAddress } from '../net/public-address.js';
import { jwksUrlRefusal, type JwksFetchPolicy } from './jwks-url.js';

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** Resolves as the system does, and refuses the connection when any address found is not public. */
function publicOnlyLookup(hostname: string, options: { all?: boolean; family?: number }, callback: LookupCallback): void {
  dnsLookup(hostname, { family: options.family ?? 0, all: true }, (err, addresses) => {
    if (err) return callback(err, []);
    const refused = addresses.find((a) => !isPublicAddress(a.address));
    if (refused !== undefined || addresses.length === 0) {
      return callback(Object.assign(new Error(`${hostname} resolves to a non-public address`), { code: 'ENOTPUBLIC' }), []);
    }
    if (options.all) callback(null, addresses);
    else callback(null, addresses[0]!.address, addresses[0]!.family);
  });
}

const anyAddress = new Agent({ connect: { timeout: 5_000 } });
const publicOnly = new Agent({ connect: { timeout: 5_000, lookup: publicOnlyLookup as never } });

/** The parsed document at `url`; throws an Error whose message says why not (for the log only). */
export async function fetchJwksDocument(url: string, policy: JwksFetchPolicy, signal: AbortSignal): Promise<unknown> {
  const refusal = jwksUrlRefusal(url, policy);
  if (refusal !== null) throw new Error(refusal);
  const guarded = policy.tenant !== null && !policy.tenant.allowPrivateAddresses;
  const res = await request(url, { headers: { accept: 'application/json' }, signal, dispatcher: guarded ? publicOnly : anyAddress });
  // A body given up (refused below, or the signal firing after it) reports that as an error: expected here.
  res.body.on('error', () => {});
  if (res.statusCode < 200 || res.statusCode > 299) {
    res.body.destroy();
    throw new Error(`HTTP ${res.statusCode}`);
  }
  const declared = Number(res.headers['content-length']);
  if (Number.isFinite(declared) && declared > policy.maxBytes) {
    res.body.destroy();
    throw new Error(`document of ${declared} bytes is larger than auth.jwks.maxBytes (${policy.maxBytes})`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    size += (chunk as Buffer).length;
    if (size > policy.maxBytes) {
      res.body.destroy();
      throw new Error(`document larger than auth.jwks.maxBytes (${policy.maxBytes})`);
    }
    chunks.push(chunk as Buffer);
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}
