/**
 * A configuration handed to another thread or process in parts: everything but the tenants first,
 * then the tenants in chunks, each its own message. The receiver copies or parses one chunk per
 * turn of its event loop, so a file of 100,000 tenants never holds it for one long turn (one
 * message of the whole file took a worker's event loop for the time of parsing it all).
 */
import type { RawConfig } from './schema.js';
import { rememberTenantIds, tenantIds } from './tenant-ids.js';

export type ConfigHead = Omit<RawConfig, 'tenants'>;
export type TenantPart = RawConfig['tenants'];

/** Tenants per part: copying or parsing one takes the receiver about a millisecond. */
export const TENANTS_PER_PART = 500;

/** `config` as its head and its tenants in parts of at most `size`. */
export function splitConfig(config: RawConfig, size = TENANTS_PER_PART): { head: ConfigHead; parts: Generator<TenantPart> } {
  const { tenants, ...head } = config;
  return { head, parts: tenantParts(tenants, size) };
}

function* tenantParts(tenants: RawConfig['tenants'], size: number): Generator<TenantPart> {
  const ids = tenantIds(tenants);
  for (let i = 0; i < ids.length; i += size) {
    const part: TenantPart = {};
    for (let k = i; k < Math.min(i + size, ids.length); k++) part[ids[k]!] = tenants[ids[k]!]!;
    yield part;
  }
}

/** Collects the parts of one configuration, in the order they were sent. */
export class ConfigJoin {
  readonly #head: ConfigHead;
  readonly #tenants: RawConfig['tenants'] = {};
  // Kept as they arrive: listing a map of 100,000 keys afterwards takes one long turn (tenant-ids.ts).
  readonly #ids: string[] = [];

  constructor(head: ConfigHead) {
    this.#head = head;
  }

  add(part: TenantPart): void {
    for (const id of Object.keys(part)) {
      this.#tenants[id] = part[id]!;
      this.#ids.push(id);
    }
  }

  config(): RawConfig {
    rememberTenantIds(this.#tenants, this.#ids);
    return { ...this.#head, tenants: this.#tenants };
  }
}
