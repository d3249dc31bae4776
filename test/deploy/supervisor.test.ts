/** The supervisor's pure decisions: how many workers, and when a dead one is replaced. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_RESTART_POLICY, nextRestart, workerCount } from '../../src/supervisor.js';
import { parseConfig } from '../../src/config/load.js';

const base = {
  plans: {
    p: {
      limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
      quotas: { messagesPerMonth: 0, ingressBytesPerMonth: 0 },
      storageBytes: 0,
    },
  },
  tenants: {},
};
const config = (server: object, redis: object = {}) => parseConfig({ ...base, server, redis }, {});

describe('workerCount', () => {
  it.each([
    ['default without Redis: one process (in-memory state is per process)', {}, {}, 1],
    ['default with a Redis URL: one per CPU', {}, { url: 'redis://r:6379' }, 8],
    ['default with Redis Cluster seeds: one per CPU', {}, { cluster: ['r1:6379'] }, 8],
    ['explicit 1', { workers: 1 }, { url: 'redis://r:6379' }, 1],
    ['explicit 3', { workers: 3 }, { url: 'redis://r:6379' }, 3],
  ])('%s', (_what, server, redis, expected) => {
    expect(workerCount(config(server, redis), 8)).toBe(expected);
  });

  it('the config refuses more than one worker without Redis', () => {
    expect(() => config({ workers: 2 })).toThrow(/server\.workers: more than one worker needs shared state/);
  });
});

describe('nextRestart', () => {
  const { minUptimeMs, firstDelayMs, maxDelayMs } = DEFAULT_RESTART_POLICY;

  it('replaces a worker that ran a while at once and resets its streak', () => {
    expect(nextRestart(5, minUptimeMs)).toEqual({ streak: 0, delayMs: 0 });
  });

  it('doubles the delay with each quick death in a row, up to the maximum (a crash loop does not spin)', () => {
    const delays: number[] = [];
    let streak = 0;
    for (let i = 0; i < 12; i++) {
      const next = nextRestart(streak, minUptimeMs - 1);
      streak = next.streak;
      delays.push(next.delayMs);
    }
    expect(delays.slice(0, 3)).toEqual([firstDelayMs, firstDelayMs * 2, firstDelayMs * 4]);
    expect(delays.at(-1)).toBe(maxDelayMs);
    expect(delays.every((d, i) => i === 0 || d >= delays[i - 1]!)).toBe(true);
  });
});
