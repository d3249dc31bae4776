/**
 * A clock for edges under test: real time plus an offset a test moves (to wait out a Retry-After
 * without sleeping), and which a test may stop so a slow machine cannot refill a bucket mid-burst.
 * Redis's own key expiry still runs while it is stopped: keep stops short.
 */
export function testClock() {
  let frozen: number | null = null;
  let ahead = 0;
  return {
    now: (): number => (frozen ?? Date.now()) + ahead,
    advance(ms: number): void {
      ahead += ms;
    },
    async stopped<T>(fn: () => Promise<T>): Promise<T> {
      frozen = Date.now();
      try {
        return await fn();
      } finally {
        frozen = null;
      }
    },
  };
}
