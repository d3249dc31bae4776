/**
 * Which configured broker URLs name the same broker process, so the directory can refuse two
 * tenants on one broker that cannot tell them apart (docs/tenancy.md, "Dedicated and shared
 * brokers"). A broker is a listening socket: what identifies it is the host and the port, not the
 * scheme's spelling, a path prefix, user info or the case of the name.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';

/** Addresses that reach this machine: every spelling of them names the same local socket. */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
// Connecting to 0.0.0.0 or :: reaches the local machine on Linux and macOS.
LOOPBACK.addAddress('0.0.0.0', 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');
LOOPBACK.addAddress('::', 'ipv6');
LOOPBACK.addSubnet('::ffff:127.0.0.0', 104, 'ipv6');
LOOPBACK.addAddress('::ffff:0.0.0.0', 'ipv6');

const DEFAULT_PORT: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/**
 * `host:port` of a broker URL: host lower-cased (WHATWG URL parsing also folds IPv4 spellings such
 * as `2130706433` or `0x7f.1` to dotted form), without a trailing dot, every loopback name or
 * address as `loopback`, the scheme's default port made explicit. DNS aliases of one address are
 * not detected: they resolve only at connect time.
 */
export function brokerIdentity(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  let host = u.hostname.toLowerCase();
  if (host.length > 1 && host.endsWith('.')) host = host.slice(0, -1);
  const bare = host.startsWith('[') ? host.slice(1, -1) : host;
  // An IPv4-mapped IPv6 address (`[::ffff:10.0.0.5]`, which the URL parser writes `[::ffff:a00:5]`)
  // reaches the same IPv4 socket on a dual-stack host: name it by its IPv4 form.
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(bare);
  if (mapped) {
    const [hi, lo] = [parseInt(mapped[1]!, 16), parseInt(mapped[2]!, 16)];
    host = `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
  if (host === 'localhost' || host.endsWith('.localhost') || (isIPv4(host) && LOOPBACK.check(host, 'ipv4')) || (isIPv6(bare) && LOOPBACK.check(bare, 'ipv6'))) {
    host = 'loopback';
  }
  return `${host}:${u.port || DEFAULT_PORT[u.protocol] || ''}`;
}
