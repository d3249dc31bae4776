/**
 * A configuration handed to another process in parts: everything but the tenants first, then the
 * tenant ids in file order in chunks, each its own message with the tenants it carries. The
 * receiver parses one chunk per turn of its event loop, so a file of 100,000 tenants never holds
 * it for one long turn (one message of the whole file took a worker's event loop for the time of
 * parsing it all). When the receiver holds the map the file was read against, only the tenants
 * that changed are carried: the others are the receiver's own objects, nothing to parse, copy or
 * compare (tenant-ids.ts, changesOf).
 */
import type { RawConfig } from './schema.js';
import { changesOf, rememberChanges, rememberTenantIds, tenantIds } from './tenant-ids.js';

export type ConfigHead = Omit<RawConfig, 'tenants'>;
export type TenantMap = RawConfig['tenants'];

/** The first message: the settings, and `changed` (added, changed or removed ids) when only those tenants are carried. */
export interface HeadPart {
  readonly config: ConfigHead;
  readonly changed: readonly string[] | null;
}

/** The ids of a chunk in file order, and the tenants carried among them. */
export interface TenantsPart {
  readonly ids: readonly string[];
  readonly tenants: TenantMap;
}

/** Ids per part: parsing one with its tenants takes the receiver about a millisecond. */
export const IDS_PER_PART = 500;

/**
 * `config` as its head and its tenants in parts. `held`: the tenant map the receiver holds; when
 * the file was read against it, only the tenants that changed are carried.
 */
export function splitConfig(config: RawConfig, held: TenantMap | null = null, size = IDS_PER_PART): { head: HeadPart; parts: Generator<TenantsPart> } {
  const { tenants, ...rest } = config;
  const changes = changesOf(tenants);
  const changed = changes !== undefined && held !== null && changes.base === held ? changes.changed : null;
  return { head: { config: rest, changed }, parts: tenantParts(tenants, changed === null ? null : new Set(changed), size) };
}

function* tenantParts(tenants: TenantMap, only: ReadonlySet<string> | null, size: number): Generator<TenantsPart> {
  const ids = tenantIds(tenants);
  for (let i = 0; i < ids.length; i += size) {
    const chunk = ids.slice(i, i + size);
    const carried: TenantMap = {};
    for (const id of chunk) if (only === null || only.has(id)) carried[id] = tenants[id]!;
    yield { ids: chunk, tenants: carried };
  }
}

/**
 * Collects tenant parts in the order they were sent: a tenant a part does not carry is `base`'s
 * object (the map the sender compared with). Also what the off-thread reader's chunks are joined
 * with (load.ts).
 */
export class TenantsJoin {
  readonly #base: TenantMap;
  readonly #tenants: TenantMap = {};
  // Kept as they arrive: listing a map of 100,000 keys afterwards takes one long turn (tenant-ids.ts).
  readonly #ids: string[] = [];

  constructor(base: TenantMap) {
    this.#base = base;
  }

  add(part: TenantsPart): void {
    for (const id of part.ids) {
      this.#tenants[id] = part.tenants[id] ?? this.#base[id]!;
      this.#ids.push(id);
    }
  }

  /** The joined map, its ids remembered, and `changed` (the ids that differ from `base`) when the sender said. */
  tenants(changed: readonly string[] | null): TenantMap {
    rememberTenantIds(this.#tenants, this.#ids);
    if (changed !== null) rememberChanges(this.#tenants, { base: this.#base, changed });
    return this.#tenants;
  }
}

/** Collects the parts of one configuration, in the order they were sent; `held` is the map a head with `changed` was split against. */
export class ConfigJoin {
  readonly #head: HeadPart;
  readonly #tenants: TenantsJoin;

  constructor(head: HeadPart, held: TenantMap | null) {
    if (head.changed !== null && held === null) throw new Error('configuration changes sent to a receiver that holds none');
    this.#head = head;
    this.#tenants = new TenantsJoin(held ?? {});
  }

  add(part: TenantsPart): void {
    this.#tenants.add(part);
  }

  config(): RawConfig {
    return { ...this.#head.config, tenants: this.#tenants.tenants(this.#head.changed) };
  }
}
