/**
 * Preloaded into the proxy process by the benchmark only (`--import ./bench/probe.ts`): measures
 * event-loop delay with monitorEventLoopDelay, takes CPU profiles of a chosen window (so the
 * profile holds the measured load, not the start-up), counts GC and allocated bytes over a chosen
 * window, and answers the parent over IPC. Nothing in src/ knows about it. Inert unless
 * QE_BENCH_PROBE=1 and an IPC channel exists, and only in the primary (cluster workers have an IPC
 * channel of their own, to the primary).
 */
import cluster from 'node:cluster';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';
import { constants, monitorEventLoopDelay, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { GCProfiler } from 'node:v8';

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

/** GC pauses of one kind over a window: count and main-thread time. */
export interface GcKind {
  count: number;
  ms: number;
}

/** GC and allocation over the window between `gc-start` and `gc-stop`. */
export interface GcReading {
  type: 'gc';
  /** Scavenges (young generation). */
  minor: GcKind;
  /** Mark-sweep-compact (whole heap). */
  major: GcKind;
  /** Incremental marking steps and weak-callback processing (the rest of the entries). */
  other: GcKind;
  /**
   * Bytes allocated on the V8 heap: the growth of used heap between one GC's end and the next
   * one's start, summed (V8 frees only in a GC, so the growth between two is what was allocated).
   */
  allocatedBytes: number;
  /** Wall time of the window, ms. */
  windowMs: number;
}

/** PerformanceObserver's gc kinds: minor and major by name, incremental and weak callbacks as "other". */
function kindOf(entry: PerformanceEntry): 'minor' | 'major' | 'other' {
  const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
  if (kind === constants.NODE_PERFORMANCE_GC_MINOR) return 'minor';
  if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) return 'major';
  return 'other';
}

/** One measuring window: the observer's entries and V8's heap figures at every GC. */
function gcWindow(): { stop(): GcReading } {
  const totals = { minor: { count: 0, ms: 0 }, major: { count: 0, ms: 0 }, other: { count: 0, ms: 0 } };
  const add = (entries: readonly PerformanceEntry[]) => {
    for (const e of entries) {
      const t = totals[kindOf(e)];
      t.count++;
      t.ms += e.duration;
    }
  };
  const observer = new PerformanceObserver((list) => add(list.getEntries()));
  observer.observe({ entryTypes: ['gc'] });
  // The profiler records used heap size synchronously in each GC's prologue and epilogue.
  const profiler = new GCProfiler();
  const startedAt = performance.now();
  const usedAtStart = process.memoryUsage().heapUsed;
  profiler.start();
  return {
    stop(): GcReading {
      const usedAtEnd = process.memoryUsage().heapUsed;
      const profile = profiler.stop();
      // Entries not yet delivered to the callback (it runs asynchronously).
      add(observer.takeRecords());
      observer.disconnect();
      let allocated = 0;
      let after = usedAtStart;
      for (const s of profile?.statistics ?? []) {
        allocated += s.beforeGC.heapStatistics.usedHeapSize - after;
        after = s.afterGC.heapStatistics.usedHeapSize;
      }
      allocated += usedAtEnd - after;
      return { type: 'gc', ...totals, allocatedBytes: Math.max(0, allocated), windowMs: performance.now() - startedAt };
    },
  };
}

/** The V8 sampling heap profiler, counting objects GC already collected too (a cross-check of `allocatedBytes`). */
function startSampling(session: Session, intervalBytes: number, done: () => void): void {
  session.post('HeapProfiler.enable', () =>
    session.post(
      'HeapProfiler.startSampling',
      { samplingInterval: intervalBytes, includeObjectsCollectedByMajorGC: true, includeObjectsCollectedByMinorGC: true },
      done,
    ),
  );
}

interface SampleNode {
  selfSize: number;
  children: SampleNode[];
}

function sampledBytes(node: SampleNode): number {
  let total = node.selfSize;
  for (const c of node.children) total += sampledBytes(c);
  return total;
}

if (process.env.QE_BENCH_PROBE === '1' && process.send && cluster.isPrimary) {
  const h = monitorEventLoopDelay({ resolution: 10 });
  h.enable();
  let session: Session | null = null;
  let gc: { stop(): GcReading } | null = null;
  let sampler: Session | null = null;
  process.on('message', (m: { type?: string; file?: string; intervalBytes?: number }) => {
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
    if (m?.type === 'gc-start') {
      gc = gcWindow();
      process.send!({ type: 'gc-started' });
    }
    if (m?.type === 'gc-stop' && gc) {
      const reading = gc.stop();
      gc = null;
      process.send!(reading);
    }
    if (m?.type === 'sample-start') {
      sampler = new Session();
      sampler.connect();
      startSampling(sampler, m.intervalBytes ?? 32_768, () => process.send!({ type: 'sampling' }));
    }
    if (m?.type === 'sample-stop' && sampler) {
      const s = sampler;
      s.post('HeapProfiler.stopSampling', (err, result) => {
        // With a file: the profile itself, for where the bytes were allocated (bench/profile.ts reads CPU profiles only).
        if (!err && m.file) writeFileSync(m.file, JSON.stringify(result.profile));
        s.disconnect();
        sampler = null;
        process.send!({ type: 'sampled', bytes: err ? null : sampledBytes(result.profile.head as SampleNode) });
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
