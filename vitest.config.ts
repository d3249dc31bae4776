import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 20000,
    hookTimeout: 20000,
    pool: 'forks',
    // Suites start real servers on port 0 and talk to a real redis-server; two at a time fits 2 cores.
    maxWorkers: 2,
    reporters: ['default'],
  },
});
