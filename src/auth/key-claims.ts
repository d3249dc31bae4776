/**
 * Which trust domain (the global settings, '', or a tenant with its own `auth`) may use each key a
 * JWKS serves. The directory refuses settings that share key material up front (key-trust.ts);
 * this is the same rule for keys that only appear later, when an endpoint is fetched: a JWKS
 * member whose thumbprint another domain already trusts (its PEM key, or a JWKS member it was
 * serving first) is refused for this domain, unless issuer or audience tell the two domains'
 * tokens apart. Refusals are logged at error level each time the set is loaded.
 */
import type { Logger } from '../observability/log.js';
import type { JwksMember } from './jwt.js';
import { separable, trustedKeys, type TrustSettings } from './key-trust.js';

interface Domain {
  readonly sig: string;
  readonly settings: TrustSettings;
  readonly keys: ReadonlySet<string>;
}

const NONE: ReadonlySet<string> = new Set();

export class KeyClaims {
  readonly #log: Logger;
  readonly #domains = new Map<string, Domain>();
  /** JWKS member thumbprint -> the domain that was served it first. */
  readonly #owner = new Map<string, string>();
  readonly #refused = new Map<string, Set<string>>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /** Registers a domain's settings; changed settings give up the keys it claimed. */
  set(domain: string, settings: TrustSettings): void {
    const sig = JSON.stringify([settings.secret, settings.publicKey, settings.jwksUrl, settings.issuer, settings.audience]);
    if (this.#domains.get(domain)?.sig === sig) return;
    this.remove(domain);
    this.#domains.set(domain, { sig, settings, keys: trustedKeys(settings) });
  }

  /** Forgets every tenant domain not in `live` (the global one stays). */
  retain(live: ReadonlySet<string>): void {
    for (const id of [...this.#domains.keys()]) if (id !== '' && !live.has(id)) this.remove(id);
  }

  remove(domain: string): void {
    this.#domains.delete(domain);
    this.#refused.delete(domain);
    for (const [t, owner] of this.#owner) if (owner === domain) this.#owner.delete(t);
  }

  /** Every domain whose own settings name `url`, or only `only`, screens the set just loaded from it. */
  screen(url: string, members: readonly JwksMember[], only?: string): void {
    for (const [id, d] of this.#domains) {
      if (d.settings.jwksUrl !== url || (only !== undefined && id !== only)) continue;
      const refused = new Set<string>();
      for (const m of members) {
        if (m.thumbprint === null) continue;
        const holder = this.#holder(id, d, m.thumbprint);
        if (holder === null) {
          if (!this.#owner.has(m.thumbprint)) this.#owner.set(m.thumbprint, id);
          continue;
        }
        refused.add(m.thumbprint);
        this.#log.error(
          {
            tenant: id === '' ? null : id,
            trustedBy: holder === '' ? 'global auth settings' : `tenant "${holder}"`,
            jwksUrl: url,
            kid: m.jwk.kid ?? null,
            thumbprint: m.thumbprint,
          },
          'JWKS serves a key another trust domain already trusts, with no distinct issuer or audience: that key is refused for this tenant',
        );
      }
      this.#refused.set(id, refused);
    }
  }

  /** The thumbprints `domain` must not use. */
  refused(domain: string): ReadonlySet<string> {
    return this.#refused.get(domain) ?? NONE;
  }

  /** The other domain that holds `thumbprint` and whose tokens cannot be told apart from `d`'s; null when none. */
  #holder(id: string, d: Domain, thumbprint: string): string | null {
    const owner = this.#owner.get(thumbprint);
    for (const [other, o] of this.#domains) {
      if (other === id || separable(d.settings, o.settings)) continue;
      if (owner === other || o.keys.has(`jwk:${thumbprint}`)) return other;
    }
    return null;
  }
}
