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
  {
    version: 3,
    name: 'api keys',
    // Tenant API keys by their SHA-256, never the key (src/keys/store-keys.ts); times in ms since
    // the epoch, as the records carry them. Last use stays hot state (Redis or memory).
    sql: `CREATE TABLE api_keys (
      id text PRIMARY KEY,
      tenant text NOT NULL,
      name text NOT NULL,
      roles text[] NOT NULL,
      created_at bigint NOT NULL,
      expires_at bigint,
      hash text NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$')
    );
    CREATE INDEX api_keys_by_tenant ON api_keys (tenant)`,
  },
  {
    version: 4,
    name: 'usage ledger',
    // One row per tenant and UTC hour, added to by each flush; refusals by code beside it, only
    // where some occurred. A flush applies only above its instance's last applied sequence number,
    // in the transaction that adds its counts (src/metering/ledger.ts).
    sql: `CREATE TABLE usage_hour (
      tenant text NOT NULL,
      hour timestamptz NOT NULL,
      requests bigint NOT NULL DEFAULT 0,
      messages_pushed bigint NOT NULL DEFAULT 0,
      messages_delivered bigint NOT NULL DEFAULT 0,
      acks bigint NOT NULL DEFAULT 0,
      ingress_bytes bigint NOT NULL DEFAULT 0,
      egress_bytes bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (tenant, hour)
    );
    CREATE INDEX usage_hour_by_hour ON usage_hour (hour);
    CREATE TABLE usage_refusal (
      tenant text NOT NULL,
      hour timestamptz NOT NULL,
      code text NOT NULL,
      n bigint NOT NULL,
      PRIMARY KEY (tenant, hour, code)
    );
    CREATE TABLE usage_flush (
      instance text PRIMARY KEY,
      seq bigint NOT NULL,
      at timestamptz NOT NULL DEFAULT now()
    )`,
  },
];
