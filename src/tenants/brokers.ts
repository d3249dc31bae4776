/**
 * Which configured broker URLs name the same broker process, so the directory can refuse two
 * tenants on one broker that cannot tell them apart (docs/tenancy.md, "Dedicated and shared
 * brokers"). A broker is a listening socket: what identifies it is the host and the port, not the
 * scheme's spelling, a path prefix, user info or the case of the name. The addresses a name
 * resolves to are added by broker-addresses.ts.
 */
import { urlHost, urlPort } from '../net/url-host.js';

/** `host:port` of a broker URL, as src/net/url-host.ts names them; the text itself when it does not parse. */
export function brokerIdentity(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  return `${urlHost(u)}:${urlPort(u)}`;
}

/**
 * `parse` remembered per URL: parsing a URL and checking it for loopback costs microseconds, and
 * builds and reloads ask for every tenant's brokers. Bounded: dedicated brokers make as many URLs
 * as tenants, and removed ones must not stay.
 */
export function memoByUrl<T>(parse: (url: string) => T, max = 100_000): (url: string) => T {
  const seen = new Map<string, T>();
  return (url) => {
    if (seen.has(url)) return seen.get(url) as T;
    if (seen.size >= max) seen.clear();
    const value = parse(url);
    seen.set(url, value);
    return value;
  };
}
