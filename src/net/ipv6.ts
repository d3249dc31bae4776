/** IPv6 address text read as groups, and the IPv4 address some IPv6 forms carry. */

/** The first 96 bits of the IPv6 forms that carry an IPv4 address in their last 32, as ipv6Groups gives them. */
const IPV4_CARRIERS: readonly string[] = ['0:0:0:0:0:ffff', '64:ff9b:0:0:0:0'];

/**
 * The IPv4 address an IPv6 address (its ipv6Groups) carries: IPv4-mapped `::ffff:a.b.c.d`, or
 * NAT64's well-known prefix `64:ff9b::/96` (RFC 6052); null for any other address. Given groups,
 * so a caller that needs them too reads the address once.
 */
export function carriedIpv4(groups: readonly string[]): string | null {
  if (!IPV4_CARRIERS.includes(groups.slice(0, 6).join(':'))) return null;
  const hi = Number.parseInt(groups[6]!, 16);
  const lo = Number.parseInt(groups[7]!, 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

/** The eight groups of an IPv6 address, `::` expanded, an embedded dotted IPv4 tail as two groups, each without leading zeros. */
export function ipv6Groups(ip: string): string[] {
  const zone = ip.indexOf('%');
  let bare = zone === -1 ? ip : ip.slice(0, zone);
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(bare);
  if (dotted !== null) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    bare = `${bare.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = bare.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const fill = tail === undefined ? [] : Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...fill, ...right].map((g) => g.replace(/^0+(?=.)/, '').toLowerCase());
}
