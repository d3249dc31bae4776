/**
 * The client's address, for everything that acts on it (the per-client limits, the access log,
 * the X-Forwarded-For the broker gets). Proxies are trusted by address, as nginx's
 * `set_real_ip_from` with `real_ip_recursive on`: X-Forwarded-For is read only when the socket peer
 * is in `server.trustedProxies`, and then the client is the right-most entry that is not itself a
 * trusted proxy. Entries left of that one were written by the client and are never read. With no
 * trusted proxies the client is the socket peer.
 */
import { BlockList, isIP } from 'node:net';

export interface ClientAddresses {
  /** True when `peer` (the socket's remote address) is a trusted proxy. */
  trusts(peer: string | undefined): boolean;
  /** The client address: the peer, or what the trusted proxies in front of it say. IPv4-mapped IPv6 as IPv4. */
  of(peer: string | undefined, forwardedFor: string | string[] | undefined): string;
}

/** Problems with `cidrs` as trustedProxies entries (`10.0.0.0/8`, `2001:db8::/32`, or one address); empty when valid. */
export function invalidProxyRanges(cidrs: readonly string[]): string[] {
  return cidrs.filter((c) => parseRange(c) === null);
}

export function createClientAddresses(cidrs: readonly string[]): ClientAddresses {
  const list = new BlockList();
  for (const c of cidrs) {
    const r = parseRange(c);
    if (r === null) throw new Error(`server.trustedProxies: "${c}" is not an address or CIDR range`);
    list.addSubnet(r.address, r.prefix, r.family);
  }
  const trusted = (ip: string): boolean => {
    const family = isIP(ip);
    return family !== 0 && list.check(ip, family === 4 ? 'ipv4' : 'ipv6');
  };
  return {
    trusts: (peer) => cidrs.length > 0 && peer !== undefined && trusted(unmapped(peer)),
    of(peer, forwardedFor) {
      const from = unmapped(peer ?? '');
      if (cidrs.length === 0 || !trusted(from) || forwardedFor === undefined) return from;
      const entries = (Array.isArray(forwardedFor) ? forwardedFor.join(',') : forwardedFor).split(',');
      let client = from;
      for (let i = entries.length - 1; i >= 0; i--) {
        const ip = unmapped(entries[i]!.trim());
        // A trusted proxy appended something that is no address: the last good hop is all we know.
        if (isIP(ip) === 0) return client;
        client = ip;
        if (!trusted(ip)) return ip;
      }
      return client;
    },
  };
}

/** `::ffff:1.2.3.4` as `1.2.3.4`. */
function unmapped(ip: string): string {
  return ip.startsWith('::ffff:') && ip.includes('.') ? ip.slice(7) : ip;
}

function parseRange(cidr: string): { address: string; prefix: number; family: 'ipv4' | 'ipv6' } | null {
  const slash = cidr.indexOf('/');
  const address = slash === -1 ? cidr : cidr.slice(0, slash);
  const family = isIP(address);
  if (family === 0) return null;
  const max = family === 4 ? 32 : 128;
  const prefix = slash === -1 ? max : Number(cidr.slice(slash + 1));
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > max || (slash !== -1 && !/^\d+$/.test(cidr.slice(slash + 1)))) return null;
  return { address, prefix, family: family === 4 ? 'ipv4' : 'ipv6' };
}
