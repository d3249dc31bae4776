/**
 * Per-client limits that protect the edge itself rather than meter a tenant: signature checks
 * (a token that is not yet cached costs one; RS256 and ES256 especially) and anonymous public
 * routes. rate-limiter-flexible's memory limiter, one per process, keyed by client address (an
 * IPv6 client by its /64, an IPv4 one carried in IPv6 by that IPv4 address, see clientKey). Design and bounds:
 * docs/decisions/0016-signature-check-throttle.md (why memory and not Redis: 0007).
 *
 * Signature checks are gated, not failures in general: a token refused without one (malformed,
 * too large, wrong alg, unknown kid, expired, wrong issuer) costs a header decode and is not
 * counted, so it cannot spend the budget valid tokens need.
 * - Failed checks are counted per (address, unverified issuer + subject): garbage locks out only
 *   the identity it names, never a client behind the same address with a token of its own.
 * - All checks are counted per address per second: at `signaturesPerSec` an address's tokens
 *   get 429 before their check, except identities that verified from that address lately, which
 *   have a second budget of the same size. CPU per address is so bounded by 2 x signaturesPerSec
 *   checks per second.
 */
import { createHash } from 'node:crypto';
import { isIPv6 } from 'node:net';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import { decodeJwt } from 'jose';
import type { RawConfig } from '../config/schema.js';
import type { SignatureGate } from '../auth/jwt.js';
import { ExpiringMap } from '../cache/expiring-map.js';
import { isApiKey, keyId } from '../keys/format.js';
import { carriedIpv4, ipv6Groups } from '../net/ipv6.js';
import { edgeError, type EdgeError } from '../errors.js';

export interface ClientLimits {
  /** The gate for one token from one client (its key, see clientKey). */
  signatureGate(client: string, token: string): SignatureGate;
  /** Takes one anonymous request for this client: a 429 when over the limit, null when admitted. */
  publicRequest(client: string): Promise<EdgeError | null>;
}

/** Identities remembered as verified per process; a bound on the memory an address's successes can take. */
const KNOWN_GOOD_MAX = 100_000;

type FailedAuth = RawConfig['auth']['failedAuth'];

/** Builds the limiters from `auth.failedAuth` and `server.publicRateLimit`; a limit of 0 turns one off. */
export function createClientLimits(cfg: { failedAuth: FailedAuth; publicRoutes: RawConfig['server']['publicRateLimit'] }): ClientLimits {
  const { attempts, windowSec, signaturesPerSec } = cfg.failedAuth;
  const failed = attempts > 0 ? new RateLimiterMemory({ points: attempts, duration: windowSec }) : null;
  const checks = signaturesPerSec > 0 ? new RateLimiterMemory({ points: signaturesPerSec, duration: 1 }) : null;
  const reserved = signaturesPerSec > 0 ? new RateLimiterMemory({ points: signaturesPerSec, duration: 1 }) : null;
  const knownGood = new ExpiringMap<string, true>(KNOWN_GOOD_MAX);
  const anon = cfg.publicRoutes.requests > 0 ? new RateLimiterMemory({ points: cfg.publicRoutes.requests, duration: cfg.publicRoutes.windowSec }) : null;
  return {
    signatureGate(client, token) {
      // Decoded only when a check is about to run: most tokens never get that far.
      let key: string | undefined;
      const identity = (): string => (key ??= `${client} ${identityOf(token)}`);
      return {
        async admit() {
          if (failed !== null) {
            const res = await failed.get(identity());
            if (res !== null && res.consumedPoints >= attempts) return limited(res, 'too many failed authentications for this identity from this address');
          }
          if (checks === null) return null;
          const over = await take(checks, client);
          if (over === null) return null;
          // Over the address's budget: identities that verified from here lately have their own.
          if (knownGood.get(identity(), Date.now()) && (await take(reserved!, client)) === null) return null;
          return limited(over, 'too many token signature checks from this address');
        },
        settled(ok) {
          if (ok) knownGood.set(identity(), true, Date.now() + windowSec * 1000, Date.now());
          // Rejects once over the limit; admit() reads that, it is no error here.
          else failed?.consume(identity()).catch(() => {});
        },
      };
    },
    async publicRequest(client) {
      const over = anon === null ? null : await take(anon, client);
      return over === null ? null : limited(over, 'too many requests from this address');
    },
  };
}

/** One point of `limiter` for `key`: null when taken, the limiter's answer when over. */
async function take(limiter: RateLimiterMemory, key: string): Promise<RateLimiterRes | null> {
  try {
    await limiter.consume(key);
    return null;
  } catch (res) {
    if (res instanceof RateLimiterRes) return res;
    throw res;
  }
}

function limited(res: RateLimiterRes, message: string): EdgeError {
  return edgeError('rate_limited', message, { retryAfterSec: res.msBeforeNext / 1000 });
}

/**
 * The token's unverified issuer and subject, hashed (garbage may be long): who a failure is
 * counted against. Absent or unreadable claims are one identity of their own.
 */
function identityOf(token: string): string {
  // An API key's identity is its id (the secret stays out of the limiter's keys).
  if (isApiKey(token)) return `key:${keyId(token) ?? ''}`;
  let iss: unknown;
  let sub: unknown;
  try {
    ({ iss, sub } = decodeJwt(token));
  } catch {
    // unreadable: the empty identity
  }
  return createHash('sha256')
    .update(`${typeof iss === 'string' ? iss : ''}\n${typeof sub === 'string' ? sub : ''}`)
    .digest('base64url')
    .slice(0, 22);
}

/**
 * The key a client is limited by: its address (see net/client-address.ts); IPv6 by its /64, which
 * one host usually owns whole. An IPv6 address that carries an IPv4 one is keyed as that IPv4
 * address: IPv4-mapped `::ffff:a.b.c.d`, and NAT64's well-known prefix `64:ff9b::/96` (RFC 6052),
 * behind which every IPv4 client of a NAT64 gateway shares one /64.
 */
export function clientKey(address: string): string {
  if (!isIPv6(address)) return address;
  const groups = ipv6Groups(address);
  return carriedIpv4(groups) ?? `${groups.slice(0, 4).join(':')}::/64`;
}
