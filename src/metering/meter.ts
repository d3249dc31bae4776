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
}

/** Flush health, for metrics. */
export interface FlushStats {
  readonly flushes: number;
  readonly failures: number;
  /** Age of the oldest count not yet in the store, ms (0 when everything is flushed). */
  readonly lagMs: number;
}

/** One tenant's pending counts by hour, with the current hour's counts at hand. */
class TenantHours {
  readonly hours = new Map<number, UsageCounts>();
  hour = -1;
  current: UsageCounts | null = null;

  at(hour: number): UsageCounts {
    if (hour === this.hour) return this.current!;
    let c = this.hours.get(hour);
    if (!c) {
      c = new UsageCounts();
      this.hours.set(hour, c);
    }
    this.hour = hour;
    this.current = c;
    return c;
  }
}

interface Batch {
  readonly seq: number;
  readonly data: UsageBatch;
  readonly oldestMs: number;
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
  }

  record(x: Exchange): void {
    const now = this.#clock();
    let t = this.#pending.get(x.tenantId);
    if (!t) {
      if (this.#pending.size === 0) this.#pendingSince = now;
      t = new TenantHours();
      this.#pending.set(x.tenantId, t);
    }
    countExchange(t.at(now - (now % HOUR_MS)), x);
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
    return true;
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
    const batch = { seq: ++this.#seq, data, oldestMs: this.#pendingSince };
    this.#pending = new Map();
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
    return { flushes: this.#flushes, failures: this.#failures, lagMs: oldest === null ? 0 : Math.max(0, this.#clock() - oldest) };
  }

  /** Stops the timer, flushes what is left (drain), closes the store. */
  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
    await this.drain();
    await this.#store.close();
  }
}
