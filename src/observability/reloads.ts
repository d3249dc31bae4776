/**
 * What became of the configuration reloads (SIGHUP): the last one's time, result and problems,
 * the settings waiting for a restart, and counts by result. Read by the admin API
 * (`GET /admin/v1/reloads`) and by /metrics, so an operator sees a refused file, or a setting
 * waiting for a restart, without reading the logs.
 */

/** The last reload, as the admin API shows it. */
export interface LastReload {
  /** When it was tried (ISO 8601). */
  readonly at: string;
  readonly result: 'applied' | 'refused';
  /** Why it was refused (each `path: message`); empty when applied. */
  readonly problems: readonly string[];
  /** Settings (dotted paths) this reload changed and applied in every process. */
  readonly appliedSettings: readonly string[];
  /** Settings (dotted paths) whose file value differs from what runs: they apply only after a restart. */
  readonly restartNeeded: readonly string[];
}

export class ReloadHistory {
  #last: LastReload | null = null;
  #atMs = 0;
  #restartNeeded: readonly string[] = [];
  readonly counts = { applied: 0, refused: 0 };

  constructor(private readonly clock: () => number = Date.now) {}

  applied(plan: { applied: readonly string[]; restartNeeded: readonly string[] }): void {
    this.#restartNeeded = [...plan.restartNeeded];
    this.#record('applied', [], plan.applied, plan.restartNeeded);
  }

  refused(problems: readonly string[]): void {
    this.#record('refused', problems, [], []);
  }

  /** Settings waiting for a restart since the last applied reload (a refused one changes nothing). */
  get restartNeeded(): readonly string[] {
    return this.#restartNeeded;
  }

  /** The last reload, or null when none was tried since the start. */
  get last(): LastReload | null {
    return this.#last;
  }

  /** Epoch ms of the last reload; 0 when none. */
  get lastAtMs(): number {
    return this.#atMs;
  }

  #record(result: LastReload['result'], problems: readonly string[], appliedSettings: readonly string[], restartNeeded: readonly string[]): void {
    this.#atMs = this.clock();
    this.counts[result]++;
    this.#last = {
      at: new Date(this.#atMs).toISOString(),
      result,
      problems: [...problems],
      appliedSettings: [...appliedSettings],
      restartNeeded: [...restartNeeded],
    };
  }
}
