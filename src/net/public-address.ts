/**
 * Whether an address is on the public internet: what a tenant-named URL may reach (docs/security.md,
 * "JWKS endpoints"). Everything IANA reserves for special use is not: loopback, private (RFC 1918,
 * ULA), shared (CGNAT), link-local, documentation, benchmarking, multicast and reserved ranges. An
 * IPv6 address that carries an IPv4 one (IPv4-mapped, NAT64) is judged by that IPv4 address.
 */
import { BlockList, isIP } from 'node:net';
import { carriedIpv4, ipv6Groups } from './ipv6.js';

const NON_PUBLIC = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  NON_PUBLIC.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 127],
  ['100::', 64],
  ['64:ff9b:1::', 48],
  ['2001::', 23],
  ['2001:db8::', 32],
  ['2002::', 16],
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  NON_PUBLIC.addSubnet(net, prefix, 'ipv6');
}

/** True for an address on the public internet; false for a special-use one or text that is no address. */
export function isPublicAddress(ip: string): boolean {
  const family = isIP(ip);
  if (family === 0) return false;
  if (family === 4) return !NON_PUBLIC.check(ip, 'ipv4');
  const carried = carriedIpv4(ipv6Groups(ip));
  if (carried !== null) return isPublicAddress(carried);
  return !NON_PUBLIC.check(ip, 'ipv6');
}
