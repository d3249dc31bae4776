/**
 * SIGHUP before the process can reload: Node's default for it is to die, and the reload handler
 * exists only once the app (or the cluster) is up, seconds after the start. The CLI holds hangups
 * from its first line; the supervisor hands them over when it is ready, and one that came in the
 * meantime runs then (the file may have changed after it was read). A cluster worker only holds
 * them: a terminal's hangup reaches the whole group, and the primary reloads the workers itself.
 */
export class HeldHangups {
  #pending = false;
  readonly #hold = (): void => {
    this.#pending = true;
  };

  constructor() {
    process.on('SIGHUP', this.#hold);
  }

  /** Whether a SIGHUP came while held. */
  get pending(): boolean {
    return this.#pending;
  }

  /** From now on each SIGHUP calls `onHup`, and a held one calls it at once; the returned function goes back to holding (a draining process ignores them). */
  handOver(onHup: () => void): () => void {
    process.off('SIGHUP', this.#hold);
    process.on('SIGHUP', onHup);
    if (this.#pending) {
      this.#pending = false;
      onHup();
    }
    return () => {
      process.off('SIGHUP', onHup);
      process.on('SIGHUP', this.#hold);
    };
  }
}
