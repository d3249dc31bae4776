/**
 * Which trust domain (the global settings, '', or a tenant with its own `auth`) may use each key
 * it holds (docs/tenancy.md, "Who keeps a key"). The directory refuses settings that share key
 * material up front (key-trust.ts); this is the same rule for keys that only appear later, when an
 * endpoint is fetched. A key two domains hold (a PEM key, or a member a JWKS serves), with no
 * distinct issuer or audience between them, belongs to the one configured first, whatever was
 * fetched first: the operator's global settings, then the file's tenants in file order, then
 * tenant records by the age of their `auth` settings as the directory keeps it in Redis (so every
 * instance, and a restarted one, agrees), equal ages by id. The other domain is refused that key for as long as both hold it, and every new
 * refusal is logged at error level.
 *
 * Ownership is recomputed from every domain's settings and every loaded set each time a set loads
 * or the directory changes, through an index by thumbprint, so it costs the keys held, not the
 * square of the domains.
 */
import type { Logger } from '../observability/log.js';
import type { JwksMember } from './jwt.js';
import { separable, trustedKeys, type TrustSettings } from './key-trust.js';

/** Where a domain's settings come from; earlier in this list is older. */
export type DomainOrigin = 'global' | 'file' | 'record';

const ORIGIN_RANK: Readonly<Record<DomainOrigin, number>> = { global: 0, file: 1, record: 2 };

interface Domain {
  readonly id: string;
  readonly sig: string;
  readonly settings: TrustSettings;
  /** Thumbprints of the PEM keys its settings name. */
  readonly pem: readonly string[];
  origin: DomainOrigin;
  /** Among domains of one origin: file order for file tenants, when its `auth` was written for records. */
  seq: number;
}

const NONE: ReadonlySet<string> = new Set();

export class KeyClaims {
  readonly #log: Logger;
  readonly #domains = new Map<string, Domain>();
  /** The members each JWKS URL served at its last load. */
  readonly #served = new Map<string, readonly JwksMember[]>();
  readonly #refused = new Map<string, ReadonlySet<string>>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /**
   * Registers a domain's settings. `order` places it among domains of its origin: file order for
   * the file's tenants, the time its `auth` was written for records (none known: written before
   * ages were kept, so older than any that is). Without `origin` (a tenant not yet synced) a new
   * domain is taken for the newest record until the next sync, and a known one keeps its place.
   * False when nothing changed (its settings and place as they were): no rescreen is needed then.
   */
  set(domain: string, settings: TrustSettings, origin?: DomainOrigin, order?: number): boolean {
    const sig = JSON.stringify([settings.secret, settings.publicKey, settings.jwksUrl, settings.issuer, settings.audience]);
    const known = this.#domains.get(domain);
    if (known?.sig === sig) {
      if (origin === undefined) return false;
      const seq = order ?? 0;
      const moved = known.origin !== origin || known.seq !== seq;
      known.origin = origin;
      known.seq = seq;
      return moved;
    }
    const from = origin ?? (domain === '' ? 'global' : 'record');
    const seq = origin === undefined && from === 'record' ? Number.MAX_SAFE_INTEGER : (order ?? 0);
    const pem = [...trustedKeys(settings)].filter((k) => k.startsWith('jwk:')).map((k) => k.slice(4));
    this.#domains.set(domain, { id: domain, sig, settings, pem, origin: from, seq });
    return true;
  }

  /** Forgets every tenant domain not in `live` (the global one stays). */
  retain(live: ReadonlySet<string>): void {
    for (const id of [...this.#domains.keys()]) if (id !== '' && !live.has(id)) this.#domains.delete(id);
  }

  /** Records the members `url` serves now (`null`: the set is gone) and recomputes ownership. */
  loaded(url: string, members: readonly JwksMember[] | null): void {
    if (members === null) this.#served.delete(url);
    else this.#served.set(url, members);
    this.rescreen();
  }

  /** The thumbprints `domain` must not use. */
  refused(domain: string): ReadonlySet<string> {
    return this.#refused.get(domain) ?? NONE;
  }

  /** Recomputes every domain's refused keys from the settings and sets as they are now. */
  rescreen(): void {
    const holders = new Map<string, Domain[]>();
    const hold = (t: string, d: Domain): void => {
      const list = holders.get(t);
      if (list === undefined) holders.set(t, [d]);
      else if (!list.includes(d)) list.push(d);
    };
    for (const d of this.#domains.values()) for (const t of this.#held(d)) hold(t, d);
    const next = new Map<string, ReadonlySet<string>>();
    for (const d of this.#domains.values()) {
      let refused: Set<string> | undefined;
      for (const t of this.#held(d)) {
        const owner = holders.get(t)!.find((o) => o !== d && older(o, d) && !separable(d.settings, o.settings));
        if (owner === undefined) continue;
        refused ??= new Set();
        refused.add(t);
        if (!this.refused(d.id).has(t)) this.#report(d, owner, t);
      }
      if (refused !== undefined) next.set(d.id, refused);
    }
    this.#refused.clear();
    for (const [id, r] of next) this.#refused.set(id, r);
  }

  /** The thumbprints `d` holds: its PEM keys and the members its JWKS serves. */
  *#held(d: Domain): Iterable<string> {
    yield* d.pem;
    const url = d.settings.jwksUrl;
    if (url === null) return;
    for (const m of this.#served.get(url) ?? []) if (m.thumbprint !== null) yield m.thumbprint;
  }

  #report(d: Domain, owner: Domain, thumbprint: string): void {
    const url = d.settings.jwksUrl;
    const member = url === null ? undefined : this.#served.get(url)?.find((m) => m.thumbprint === thumbprint);
    this.#log.error(
      {
        tenant: d.id === '' ? null : d.id,
        trustedBy: owner.id === '' ? 'global auth settings' : `tenant "${owner.id}"`,
        jwksUrl: member === undefined ? null : url,
        kid: member?.jwk.kid ?? null,
        thumbprint,
      },
      'a key another trust domain configured earlier also holds, with no distinct issuer or audience: that key is refused for this tenant',
    );
  }
}

/** True when `a` was configured before `b` (see the top of this file). */
function older(a: Domain, b: Domain): boolean {
  if (a.origin !== b.origin) return ORIGIN_RANK[a.origin] < ORIGIN_RANK[b.origin];
  if (a.seq !== b.seq) return a.seq < b.seq;
  return a.id < b.id;
}
