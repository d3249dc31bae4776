/**
 * SIGHUPs in a row are handled one after another: the second file is read only after the first
 * was applied or refused, so a slow read or check of an older file can never be applied after a
 * newer one (before, both were read at once and applied in the order their checks finished).
 */
import { describe, expect, it, vi } from 'vitest';
import type { RawConfig } from '../../src/config/schema.js';
import { HeldHangups } from '../../src/hangups.js';
import { inTurn, runInProcess } from '../../src/supervisor.js';
import { startBrokerDouble } from '../helpers/broker-double.js';
import { silentLogger } from '../../src/observability/log.js';
import { testConfig } from '../helpers/edge.js';
import { waitFor } from '../helpers/wait.js';

describe('reloads in turn', () => {
  it('runs jobs in the order given, each after the one before settled, whatever its outcome', async () => {
    const next = inTurn();
    const seen: string[] = [];
    let release!: () => void;
    const slow = new Promise<void>((resolve) => {
      release = resolve;
    });
    void next(async () => {
      await slow;
      seen.push('first');
      throw new Error('refused');
    });
    const second = next(() => void seen.push('second'));
    expect(seen).toEqual([]);
    release();
    await second;
    expect(seen).toEqual(['first', 'second']);
  });

  it('a second SIGHUP reads its file only after the first reload has been applied', async () => {
    const broker = await startBrokerDouble();
    try {
      const config = testConfig([broker.url]);
      let releaseFirst!: (c: RawConfig) => void;
      const reread = vi.fn<() => Promise<RawConfig>>();
      reread.mockReturnValueOnce(
        new Promise<RawConfig>((resolve) => {
          releaseFirst = resolve;
        }),
      );
      reread.mockResolvedValue(config);
      const running = runInProcess(config, { log: silentLogger(), hangups: new HeldHangups(), reread });
      // Held until the app runs, then handed over: the held one reads the file.
      await waitFor(
        () => {
          if (reread.mock.calls.length > 0) return true;
          process.emit('SIGHUP');
          return false;
        },
        10_000,
        'the first reload started',
      );
      process.emit('SIGHUP');
      // Handled synchronously on the signal: before, the second read started here too.
      expect(reread).toHaveBeenCalledTimes(1);
      releaseFirst(config);
      await waitFor(() => reread.mock.calls.length === 2, 10_000, 'the second reload read after the first');
      process.emit('SIGTERM');
      expect(await running).toBe(0);
    } finally {
      await broker.close();
    }
  });
});
