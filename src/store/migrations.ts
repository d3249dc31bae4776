/**
 * The durable store's schema, as numbered steps applied in order (docs/store.md). A step, once
 * released, never changes: a new column or table is a new step, so an edge started against an
 * older schema brings it forward and an older edge refuses a schema newer than it knows.
 */
export interface Migration {
  readonly version: number;
  readonly name: string;
  /** Statements run in one transaction, unqualified names resolving to the edge's own schema. */
  readonly sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: 'change log',
    // Every admin write appends one row in the transaction that makes it: the audit trail, and
    // what peers follow (src/store/changes.ts).
    sql: `CREATE TABLE change_log (
      seq bigserial PRIMARY KEY,
      at timestamptz NOT NULL DEFAULT now(),
      actor text NOT NULL,
      subject text NOT NULL,
      action text NOT NULL,
      detail jsonb
    )`,
  },
  {
    version: 2,
    name: 'tenant and plan records',
    // What the admin API wrote over the configuration file (src/tenants/records.ts): one row per
    // tenant id holds its record, its tombstone (hides the file's entry), status and storage
    // overrides, and when its own auth settings were written; a row with none of them is deleted.
    sql: `CREATE TABLE tenant_records (
      id text PRIMARY KEY,
      record jsonb,
      deleted boolean NOT NULL DEFAULT false,
      status text CHECK (status IN ('active', 'suspended')),
      storage_bytes bigint CHECK (storage_bytes >= 0),
      auth_since bigint,
      updated_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE plan_records (
      id text PRIMARY KEY,
      record jsonb NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    )`,
  },
];
