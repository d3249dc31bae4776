/**
 * The Host names the admin listener answers to (docs/security.md, DNS rebinding). A web page can
 * make a browser resolve the page's own domain to 127.0.0.1 or a pod address and then read the
 * listener's tokenless endpoints as same-origin; the browser still sends that domain as Host. So
 * only names an attacker's DNS cannot answer for pass: IP literals (kubelet probes and Prometheus
 * use the pod address), `localhost`, the listener's bind host and `server.admin.allowedHosts`.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { canonicalHost } from '../tenants/model.js';

/** `host[:port]` or `[ipv6][:port]`; the port is ignored. */
const HOST_HEADER = /^(?:\[([0-9a-f:.]+)\]|([^\s:[\]]+))(?::\d*)?$/i;

/** The names allowed besides IP literals: `localhost`, the bind host and the configured ones. */
export function adminHostNames(bindHost: string, allowedHosts: readonly string[]): ReadonlySet<string> {
  return new Set(['localhost', bindHost, ...allowedHosts].map(canonicalHost));
}

/** Whether a Host header names this listener; a missing or malformed one does not. */
export function adminHostAllowed(header: string | undefined, names: ReadonlySet<string>): boolean {
  const m = header === undefined ? null : HOST_HEADER.exec(header);
  if (m === null) return false;
  if (m[1] !== undefined) return isIPv6(m[1]);
  const name = canonicalHost(m[2]!);
  return isIPv4(name) || names.has(name);
}
