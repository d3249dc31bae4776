/**
 * Preloaded into the proxy process by the benchmark only (`--import ./bench/probe.ts`): measures
 * event-loop delay with monitorEventLoopDelay, takes CPU profiles of a chosen window (so the
 * profile holds the measured load, not the start-up), and answers the parent over IPC. Nothing in src/
 * knows about it. Inert unless QE_BENCH_PROBE=1 and an IPC channel exists, and only in the primary
 * (cluster workers have an IPC channel of their own, to the primary).
 */
import cluster from 'node:cluster';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { monitorEventLoopDelay } from 'node:perf_hooks';

/** What the probe reports. */
export interface ProbeReading {
  type: 'reading';
  /** Event-loop delay since the last reset, ms. */
  loopP50Ms: number;
  loopP99Ms: number;
  loopMaxMs: number;
  loopMeanMs: number;
  rssBytes: number;
  heapUsedBytes: number;
}

if (process.env.QE_BENCH_PROBE === '1' && process.send && cluster.isPrimary) {
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  let session: Session | null = null;
  process.on('message', (m: { type?: string; file?: string }) => {
    if (m?.type === 'reset') h.reset();
    if (m?.type === 'profile-start') {
      session = new Session();
      session.connect();
      session.post('Profiler.enable', () => session!.post('Profiler.start', () => process.send!({ type: 'profiling' })));
    }
    if (m?.type === 'profile-stop' && session) {
      const s = session;
      s.post('Profiler.stop', (err, result) => {
        if (!err && m.file) writeFileSync(m.file, JSON.stringify(result.profile));
        s.disconnect();
        session = null;
        process.send!({ type: 'profiled', ok: !err });
      });
    }
    if (m?.type === 'read') {
      const mem = process.memoryUsage();
      const reading: ProbeReading = {
        type: 'reading',
        loopP50Ms: h.percentile(50) / 1e6,
        loopP99Ms: h.percentile(99) / 1e6,
        loopMaxMs: h.max / 1e6,
        loopMeanMs: h.mean / 1e6,
        rssBytes: mem.rss,
        heapUsedBytes: mem.heapUsed,
      };
      process.send!(reading);
    }
  });
  // The channel must not keep the proxy alive, nor change how it exits.
  process.channel?.unref();
}
