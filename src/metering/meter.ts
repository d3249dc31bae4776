/**
 * The meter (docs/operating.md): counts each exchange in memory, per tenant and UTC hour, and flushes
 * the counts to the usage store once per `flushMs`. The hot path touches only a per-tenant
 * object (the current hour's counts are cached on it), never Redis.
 *
 * Flushing: the pending counts are swapped out into a batch with the next sequence number. The
 * batch is retried as it is, same number and content, until the store acknowledges it; counts
 * arriving meanwhile wait in the next pending set. The store skips a sequence number it already
 * applied, so a retry of a batch that landed unacknowledged is not counted twice.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from '../observability/log.js';
import { HOUR_MS, UsageCounts, countExchange } from './counts.js';
import type { Exchange, UsageRecorder } from './recorder.js';
import type { UsageBatch, UsageStore } from './store.js';

/** Collaborators and knobs of the meter. */
export interface MeterDeps {
  readonly store: UsageStore;
  readonly log: Logger;
  readonly clock?: () => number;
  /** Flush period; default 1000 ms. */
  readonly flushMs?: number;
  /** Identifies this process's batches; default a random UUID. */
  readonly instanceId?: string;
  /** Tenant-hours held unflushed at most (pending and the batch being sent); default DEFAULT_BUFFER_ENTRIES. */
  readonly maxEntries?: number;
}

/**
 * The buffer's bound (store.usageBufferEntries defaults to it): a tenant-hour is about 0.5 KiB held (BENCHMARKS.md), so this is about 120 MiB:
 * two and a half hours of 100,000 active tenants, or ten days of 1,000 (docs/store.md, "Usage").
 */
export const DEFAULT_BUFFER_ENTRIES = 250_000;
/** While counts are dropped, a log line says how much at most this often. */
const DROP_LOG_MS = 60_000;

/** Flush health, for metrics. */
export interface FlushStats {
  readonly flushes: number;
  readonly failures: number;
  /** Age of the oldest count not yet in the store, ms (0 when everything is flushed). */
  readonly lagMs: number;
  /** Tenant-hours held unflushed, and the requests they hold. */
  readonly bufferedEntries: number;
  readonly bufferedRequests: number;
  readonly bufferCapacity: number;
  /** What was counted but dropped because the buffer was full, since the start. */
  readonly dropped: UsageCounts;
}

/** One tenant's pending counts by hour, with the current hour's counts at hand. */
class TenantHours {
  readonly hours = new Map<number, UsageCounts>();
  hour = -1;
  current: UsageCounts | null = null;

  /** The hour's counts, or null when it has none yet. */
  find(hour: number): UsageCounts | null {
    if (hour === this.hour) return this.current;
    const c = this.hours.get(hour);
    if (!c) return null;
    this.hour = hour;
    this.current = c;
    return c;
  }

  open(hour: number): UsageCounts {
    const c = new UsageCounts();
    this.hours.set(hour, c);
    this.hour = hour;
    this.current = c;
    return c;
  }
}

interface Batch {
  readonly seq: number;
  readonly data: UsageBatch;
  readonly oldestMs: number;
  readonly entries: number;
  readonly requests: number;
}

/** Counts exchanges and flushes them; also the read side of the admin API. */
export class Meter implements UsageRecorder {
  readonly instanceId: string;
  readonly #store: UsageStore;
  readonly #log: Logger;
  readonly #clock: () => number;
  readonly #flushMs: number;
  #pending = new Map<string, TenantHours>();
  #pendingSince = 0;
  /** Tenant-hours in #pending; with the batch's, what maxEntries bounds. */
  #pendingEntries = 0;
  #pendingRequests = 0;
  readonly #maxEntries: number;
  /** Everything dropped since the start, and what of it the log has not said yet. */
  readonly #dropped = new UsageCounts();
  #unreported = new UsageCounts();
  #reportedAt = 0;
  #dropping = false;
  #batch: Batch | null = null;
  #seq = 0;
  #inflight: Promise<boolean> | null = null;
  #timer: NodeJS.Timeout | null = null;
  #failing = false;
  #flushes = 0;
  #failures = 0;
  /** Everything this process counted, by tenant, as of the last batch (Prometheus counters). */
  readonly #lifetime = new Map<string, UsageCounts>();

  constructor(deps: MeterDeps) {
    this.#store = deps.store;
    this.#log = deps.log;
    this.#clock = deps.clock ?? Date.now;
    this.#flushMs = deps.flushMs ?? 1000;
    this.instanceId = deps.instanceId ?? randomUUID();
    this.#maxEntries = deps.maxEntries ?? DEFAULT_BUFFER_ENTRIES;
  }

  record(x: Exchange): void {
    const now = this.#clock();
    const hour = now - (now % HOUR_MS);
    const c = this.#pending.get(x.tenantId)?.find(hour) ?? this.#open(x.tenantId, hour, now);
    if (c) this.#pendingRequests++;
    countExchange(c ?? this.#unreported, x);
  }

  /** A new tenant-hour in the pending set, or null (the exchange is dropped) when the buffer is full. */
  #open(tenantId: string, hour: number, now: number): UsageCounts | null {
    if (this.#pendingEntries + (this.#batch?.entries ?? 0) >= this.#maxEntries) {
      if (!this.#dropping) this.#log.error({ maxEntries: this.#maxEntries }, 'metering: usage buffer full; counts dropped until the store takes them');
      this.#dropping = true;
      return null;
    }
    let t = this.#pending.get(tenantId);
    if (!t) {
      if (this.#pending.size === 0) this.#pendingSince = now;
      t = new TenantHours();
      this.#pending.set(tenantId, t);
    }
    this.#pendingEntries++;
    return t.open(hour);
  }

  /** Starts the periodic flush. */
  start(): void {
    this.#timer = setInterval(() => void this.flush(), this.#flushMs);
    this.#timer.unref();
  }

  /**
   * Sends the unacknowledged batch, or the pending counts as a new one. Single-flight: a call
   * during a flush joins it. Resolves true when the batch was acknowledged; never rejects.
   */
  flush(): Promise<boolean> {
    this.#inflight ??= this.#flushOnce().finally(() => {
      this.#inflight = null;
    });
    return this.#inflight;
  }

  async #flushOnce(): Promise<boolean> {
    if (!this.#batch) {
      if (this.#pending.size === 0) return true;
      this.#batch = this.#cut();
    }
    const batch = this.#batch;
    try {
      await this.#store.apply(this.instanceId, batch.seq, batch.data);
    } catch (err) {
      this.#failures++;
      if (!this.#failing) this.#log.warn({ err, seq: batch.seq }, 'metering: flush failed; counts kept and retried');
      this.#failing = true;
      return false;
    }
    this.#batch = null;
    this.#flushes++;
    if (this.#failing) this.#log.info({ seq: batch.seq }, 'metering: flushing again');
    this.#failing = false;
    this.#reportDropped(true);
    return true;
  }

  /** Says how much was dropped: at the end of a drop (the buffer has room again), and every DROP_LOG_MS while it lasts. */
  #reportDropped(ended: boolean): void {
    const d = this.#unreported;
    const now = this.#clock();
    if (ended) this.#dropping = false;
    if (d.requests === 0 || (!ended && now - this.#reportedAt < DROP_LOG_MS)) return;
    this.#dropped.add(d);
    this.#unreported = new UsageCounts();
    this.#reportedAt = now;
    const { requests, messagesPushed, messagesDelivered, acks, ingressBytes, egressBytes } = d;
    this.#log.error(
      { dropped: { requests, messagesPushed, messagesDelivered, acks, ingressBytes, egressBytes }, maxEntries: this.#maxEntries },
      'metering: usage dropped, the buffer was full (queen_edge_usage_dropped_total)',
    );
  }

  /** Swaps the pending counts out into a numbered batch. */
  #cut(): Batch {
    const data = new Map<string, Map<number, UsageCounts>>();
    for (const [tenantId, t] of this.#pending) {
      data.set(tenantId, t.hours);
      let life = this.#lifetime.get(tenantId);
      if (!life) {
        life = new UsageCounts();
        this.#lifetime.set(tenantId, life);
      }
      for (const c of t.hours.values()) life.add(c);
    }
    const batch = { seq: ++this.#seq, data, oldestMs: this.#pendingSince, entries: this.#pendingEntries, requests: this.#pendingRequests };
    this.#pending = new Map();
    this.#pendingEntries = 0;
    this.#pendingRequests = 0;
    return batch;
  }

  /** Flushes everything counted so far; gives up after `attempts` failed tries (logged with the loss). */
  async drain(attempts = 5, pauseMs = 200): Promise<void> {
    for (let i = 0; i < attempts; i++) {
      if (!this.#batch && this.#pending.size === 0) return;
      if (!(await this.flush())) await new Promise((r) => setTimeout(r, pauseMs));
    }
    if (this.#batch || this.#pending.size > 0) {
      this.#log.error(
        { batch: this.#batch?.seq ?? null, tenants: [...new Set([...this.#pending.keys(), ...(this.#batch?.data.keys() ?? [])])] },
        'metering: usage not flushed at shutdown is lost',
      );
    }
  }

  /** A tenant's hourly usage for hours starting in [fromMs, toMs), this instance's counts flushed first. */
  async usage(tenantId: string, fromMs: number, toMs: number): Promise<Map<number, UsageCounts>> {
    await this.flush();
    return this.#store.read(tenantId, fromMs, toMs);
  }

  /** Counts of this process per tenant, up to the last batch cut. */
  lifetime(): ReadonlyMap<string, UsageCounts> {
    return this.#lifetime;
  }

  stats(): FlushStats {
    const oldest = this.#batch ? this.#batch.oldestMs : this.#pending.size > 0 ? this.#pendingSince : null;
    this.#reportDropped(false);
    const dropped = new UsageCounts();
    dropped.add(this.#dropped);
    dropped.add(this.#unreported);
    return {
      flushes: this.#flushes,
      failures: this.#failures,
      lagMs: oldest === null ? 0 : Math.max(0, this.#clock() - oldest),
      bufferedEntries: this.#pendingEntries + (this.#batch?.entries ?? 0),
      bufferedRequests: this.#pendingRequests + (this.#batch?.requests ?? 0),
      bufferCapacity: this.#maxEntries,
      dropped,
    };
  }

  /** Stops the timer, flushes what is left (drain), closes the store. */
  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.drain();
    await this.#store.close();
  }
}
