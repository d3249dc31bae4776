/**
 * The addresses broker host names resolve to, so the directory's shared-broker rule compares
 * brokers by the sockets they reach and not only by their spelling: `http://queen-a:6632` and
 * `http://10.0.0.5:6632` are one broker when queen-a resolves to 10.0.0.5 (docs/tenancy.md,
 * "Dedicated and shared brokers").
 *
 * Names are resolved when the directory changes (start, reload, admin write, the store's reloads),
 * never on the request path: `learn` resolves the names not seen yet or seen too long ago, with the
 * system resolver the connections use, a few at a time (dns.lookup runs on libuv's small thread
 * pool, shared with file and crypto work), and returns within `timeoutMs` whatever the resolver
 * does. A lookup still running then fills the table when it ends, for the next build. A name that
 * fails keeps the addresses it had. The directory reads the table synchronously (identitiesOf).
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { brokerIdentity, memoByUrl } from './brokers.js';
import { urlHost, urlPort } from '../net/url-host.js';

/** Resolves a host name to its addresses (IPv4 dotted or IPv6 text). */
export type HostLookup = (host: string) => Promise<readonly string[]>;

export interface BrokerAddressOptions {
  /** Default: the system resolver (dns.lookup, all addresses), as the broker connections use. */
  readonly lookup?: HostLookup;
  /** Longest a `learn` waits; default 2000 ms. */
  readonly timeoutMs?: number;
  /** A name's addresses are looked up again after this long; default 60 s. */
  readonly ttlMs?: number;
  readonly clock?: () => number;
}

/** Lookups running at once: libuv's pool has 4 threads by default, file reads and crypto need the rest. */
const CONCURRENCY = 2;
/** Names kept; the oldest go first. A directory lists far fewer distinct broker names. */
const MAX_NAMES = 10_000;
/** URLs whose identities are remembered between lookups (every build asks for each broker twice). */
const MAX_MEMO = 50_000;

const systemLookup: HostLookup = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** The broker URLs a directory's tenants list: file entries (objects) or records (JSON text). */
export function brokerUrlsOf(tenants: Iterable<unknown>): string[] {
  const urls: string[] = [];
  for (const t of tenants) {
    let value = t;
    if (typeof t === 'string') {
      try {
        value = JSON.parse(t);
      } catch {
        continue;
      }
    }
    const brokers = (value as { brokers?: unknown } | null)?.brokers;
    if (Array.isArray(brokers)) for (const b of brokers) if (typeof b === 'string') urls.push(b);
  }
  return urls;
}

export class BrokerAddresses {
  readonly #lookup: HostLookup;
  readonly #timeoutMs: number;
  readonly #ttlMs: number;
  readonly #clock: () => number;
  /** Host name → its addresses as urlHost writes them, and when they were looked up. */
  readonly #known = new Map<string, { readonly hosts: readonly string[]; readonly at: number }>();
  /** Names waiting for, or in, a lookup. */
  readonly #pending = new Map<string, Promise<void>>();
  readonly #queue: { name: string; start: () => void }[] = [];
  /** identitiesOf's answers since the table last changed. */
  readonly #memo = new Map<string, readonly string[]>();
  #running = 0;

  constructor(opts: BrokerAddressOptions = {}) {
    this.#lookup = opts.lookup ?? systemLookup;
    this.#timeoutMs = opts.timeoutMs ?? 2000;
    this.#ttlMs = opts.ttlMs ?? 60_000;
    this.#clock = opts.clock ?? Date.now;
  }

  /**
   * What identifies the broker of `url` for the shared-broker rule: its host and port as written
   * (brokerIdentity), then `address:port` for each address its host name resolved to when last
   * looked up. Two URLs name one broker when their identities meet.
   */
  readonly identitiesOf = (url: string): readonly string[] => {
    let ids = this.#memo.get(url);
    if (ids !== undefined) return ids;
    const own = brokerIdentity(url);
    const name = hostNameOf(url);
    const known = name === null ? undefined : this.#known.get(name);
    const port = known === undefined ? '' : urlPort(new URL(url));
    ids = known === undefined ? [own] : [own, ...known.hosts.map((h) => `${h}:${port}`).filter((id) => id !== own)];
    if (this.#memo.size >= MAX_MEMO) this.#memo.clear();
    this.#memo.set(url, ids);
    return ids;
  };

  /** Looks up the host names of `urls` not known yet or known for longer than the TTL; settles within the timeout. */
  async learn(urls: Iterable<string>): Promise<void> {
    const now = this.#clock();
    const waits: Promise<void>[] = [];
    // Once per distinct URL: 100,000 tenants often name a handful of brokers.
    for (const url of new Set(urls)) {
      const name = hostNameOf(url);
      if (name === null) continue;
      const known = this.#known.get(name);
      if (known !== undefined && now - known.at < this.#ttlMs) continue;
      waits.push(this.#pending.get(name) ?? this.#resolve(name));
    }
    if (waits.length === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, this.#timeoutMs);
      timer.unref();
    });
    await Promise.race([Promise.all(waits), late]);
    clearTimeout(timer);
  }

  #resolve(name: string): Promise<void> {
    const done = new Promise<void>((resolve) => {
      this.#queue.push({ name, start: () => void this.#run(name).finally(resolve) });
    });
    this.#pending.set(name, done);
    this.#next();
    return done;
  }

  #next(): void {
    while (this.#running < CONCURRENCY && this.#queue.length > 0) {
      this.#running++;
      this.#queue.shift()!.start();
    }
  }

  async #run(name: string): Promise<void> {
    let hosts: readonly string[] | undefined;
    try {
      hosts = [...new Set((await this.#lookup(name)).map(addressHost))];
    } catch {
      // Unresolvable for now: keep what it had (or nothing), and try again after the TTL.
    }
    const before = this.#known.get(name);
    this.#known.delete(name);
    this.#known.set(name, { hosts: hosts ?? before?.hosts ?? [], at: this.#clock() });
    this.#memo.clear();
    if (this.#known.size > MAX_NAMES) this.#known.delete(this.#known.keys().next().value!);
    this.#pending.delete(name);
    this.#running--;
    this.#next();
  }
}

/** The host name of a broker URL, as urlHost writes it; null for an address, a loopback name or no URL. */
const hostNameOf = memoByUrl(parseHostName);

function parseHostName(url: string): string | null {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return null;
  }
  const host = urlHost(u);
  return host === 'loopback' || host.startsWith('[') || isIP(host) !== 0 ? null : host;
}

/** An address as urlHost writes the host of a URL that names it (loopback folded, IPv6 in brackets). */
function addressHost(address: string): string {
  return urlHost(new URL(`http://${isIP(address) === 6 ? `[${address}]` : address}`));
}
