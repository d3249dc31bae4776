/**
 * Per-client-IP limits that protect the edge itself rather than meter a tenant: failed
 * authentication (a 401 flood costs a signature check each, RS256 especially) and anonymous
 * public routes. rate-limiter-flexible's memory limiter, one per process, keyed by client address
 * (an IPv6 client by its /64, which one host usually owns whole). Why memory only and not Redis:
 * docs/decisions/0007-failed-auth-throttle.md.
 */
import { isIPv6 } from 'node:net';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { RawConfig } from '../config/schema.js';
import { edgeError, type EdgeError } from '../errors.js';

export interface ClientLimits {
  /** A 429 when this client failed authentication too often lately; null otherwise. */
  authBlocked(client: string): Promise<EdgeError | null>;
  /** Counts one failed authentication for this client. */
  authFailed(client: string): void;
  /** Takes one anonymous request for this client: a 429 when over the limit, null when admitted. */
  publicRequest(client: string): Promise<EdgeError | null>;
}

/** Builds both limiters from `auth.failedAuth` and `server.publicRateLimit`; a limit of 0 turns one off. */
export function createClientLimits(cfg: { failedAuth: RawConfig['auth']['failedAuth']; publicRoutes: RawConfig['server']['publicRateLimit'] }): ClientLimits {
  const failed = cfg.failedAuth.attempts > 0 ? new RateLimiterMemory({ points: cfg.failedAuth.attempts, duration: cfg.failedAuth.windowSec }) : null;
  const anon = cfg.publicRoutes.requests > 0 ? new RateLimiterMemory({ points: cfg.publicRoutes.requests, duration: cfg.publicRoutes.windowSec }) : null;
  const failedAttempts = cfg.failedAuth.attempts;
  return {
    async authBlocked(client) {
      if (failed === null) return null;
      const res = await failed.get(client);
      return res !== null && res.consumedPoints >= failedAttempts ? limited(res, 'too many failed authentications from this address') : null;
    },
    authFailed(client) {
      // Rejects once over the limit; that is authBlocked's business, not an error here.
      failed?.consume(client).catch(() => {});
    },
    async publicRequest(client) {
      if (anon === null) return null;
      try {
        await anon.consume(client);
        return null;
      } catch (res) {
        return res instanceof RateLimiterRes ? limited(res, 'too many requests from this address') : null;
      }
    },
  };
}

function limited(res: RateLimiterRes, message: string): EdgeError {
  return edgeError('rate_limited', message, { retryAfterSec: res.msBeforeNext / 1000 });
}

/**
 * The key a client is limited by: the socket's address, or with trustProxy the address the trusted
 * proxy appended last to X-Forwarded-For; IPv4-mapped IPv6 as IPv4; other IPv6 by its /64.
 */
export function clientKey(remoteAddress: string | undefined, forwardedFor: string | string[] | undefined, trustProxy: boolean): string {
  let ip = remoteAddress ?? '';
  if (trustProxy && typeof forwardedFor === 'string' && forwardedFor !== '') {
    const last = forwardedFor.slice(forwardedFor.lastIndexOf(',') + 1).trim();
    if (last !== '') ip = last;
  }
  if (ip.startsWith('::ffff:') && ip.includes('.')) return ip.slice(7);
  if (!isIPv6(ip)) return ip;
  return `${ipv6Groups(ip).slice(0, 4).join(':')}::/64`;
}

/** The eight groups of an IPv6 address, `::` expanded, each without leading zeros. */
function ipv6Groups(ip: string): string[] {
  const zone = ip.indexOf('%');
  const bare = zone === -1 ? ip : ip.slice(0, zone);
  const [head, tail] = bare.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...fill, ...right].map((g) => g.replace(/^0+(?=.)/, '').toLowerCase());
}
