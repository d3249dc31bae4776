/**
 * Which host and port a configured URL reaches, so that two URLs are compared by the socket they
 * name rather than by their text: broker URLs (two tenants on one broker) and JWKS endpoints (two
 * trust domains on one key source). DNS aliases are not seen here: broker names are resolved for
 * the directory by src/tenants/broker-addresses.ts; JWKS endpoints are compared by name.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';

/** Addresses that reach this machine: every spelling of them names the same local socket. */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
// Connecting to 0.0.0.0 or :: reaches the local machine on Linux and macOS.
LOOPBACK.addAddress('0.0.0.0', 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addAddress('::', 'ipv6');

const DEFAULT_PORT: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/**
 * The host a URL reaches: lower-cased (WHATWG URL parsing already folds IPv4 spellings such as
 * `2130706433` or `0x7f.1` to dotted form), without a trailing dot, an IPv4-mapped IPv6 address as
 * the IPv4 address it reaches on a dual-stack host, and every loopback name or address as
 * `loopback`.
 */
export function urlHost(u: URL): string {
  let host = u.hostname.toLowerCase();
  if (host.length > 1 && host.endsWith('.')) host = host.slice(0, -1);
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  // The URL parser writes `[::ffff:10.0.0.5]` as `[::ffff:a00:5]`.
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(bare);
  if (mapped) {
    const [hi, lo] = [parseInt(mapped[1]!, 16), parseInt(mapped[2]!, 16)];
    host = `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  const loopback =
    host === 'localhost' || host.endsWith('.localhost') || (isIPv4(host) && LOOPBACK.check(host, 'ipv4')) || (isIPv6(bare) && LOOPBACK.check(bare, 'ipv6'));
  return loopback ? 'loopback' : host;
}

/** The URL's port, the scheme's default made explicit; '' for a scheme without one. */
export function urlPort(u: URL): string {
  return u.port || DEFAULT_PORT[u.protocol] || '';
}

/** True when the URL names its scheme's default port (explicitly or not). */
export function defaultPort(u: URL): boolean {
  return urlPort(u) === DEFAULT_PORT[u.protocol];
}
