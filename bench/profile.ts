/**
 * Reads a V8 .cpuprofile (`node --cpu-prof`) into the two lists the analysis needs: self time by
 * function, and total (inclusive) time by area (a src/ module, a dependency, or Node itself).
 * Run directly: `npx tsx bench/profile.ts <file.cpuprofile> [lines]`.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  /** When the profile started (µs, the profiler's clock). */
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** A line of a profile summary: a name and milliseconds, with the share of non-idle time. */
export interface ProfileLine {
  name: string;
  ms: number;
  pct: number;
}

/** Self time by function and inclusive time by area, non-idle only. */
export interface ProfileSummary {
  busyMs: number;
  idleMs: number;
  selfByFunction: ProfileLine[];
  inclusiveByArea: ProfileLine[];
}

/** Where a frame's code lives: `src/<file>`, a package name, `node:<module>`, or `(native)`. */
function areaOf(url: string, fn: string): string {
  if (url === '') return fn.startsWith('(') ? fn : '(native)';
  const src = /\/src\/(.+?\.ts)/.exec(url);
  if (src && !url.includes('node_modules')) return `src/${src[1]}`;
  // The benchmark's tsc build of src/ (bench/edge.ts).
  const built = /queen-edge-bench\/dist\/(.+?)\.js/.exec(url);
  if (built) return `src/${built[1]}.ts`;
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url.replace(/^node:internal\//, 'node:').replace(/\/.*$/, '');
  return url;
}

/** Summarises `file`; `top` lines of each list. */
export async function summarizeProfile(file: string, top = 25): Promise<ProfileSummary> {
  const p = JSON.parse(await readFile(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0) / 1000);

  // Subtree totals once, children before parents (ids are not ordered, so by an explicit post-order).
  const subtree = new Map<number, number>();
  const order: ProfileNode[] = [];
  const pending = [p.nodes[0]!];
  while (pending.length > 0) {
    const n = pending.pop()!;
    order.push(n);
    for (const c of n.children ?? []) pending.push(byId.get(c)!);
  }
  for (let i = order.length - 1; i >= 0; i--) {
    const n = order[i]!;
    let t = self.get(n.id) ?? 0;
    for (const c of n.children ?? []) t += subtree.get(c) ?? 0;
    subtree.set(n.id, t);
  }

  const selfByFn = new Map<string, number>();
  const inclusive = new Map<string, number>();
  let idleMs = 0;
  let busyMs = 0;
  // Depth-first: only the outermost frame of an area adds its subtree, so recursion and nested
  // frames of the same area are counted once.
  const onStack = new Map<string, number>();
  const visit = (node: ProfileNode): void => {
    const { functionName, url, lineNumber } = node.callFrame;
    const area = areaOf(url, functionName);
    const ms = self.get(node.id) ?? 0;
    if (functionName === '(idle)') idleMs += ms;
    else if (ms > 0) {
      busyMs += ms;
      const key = `${functionName || '(anonymous)'} ${area}:${lineNumber + 1}`;
      selfByFn.set(key, (selfByFn.get(key) ?? 0) + ms);
    }
    const depth = (onStack.get(area) ?? 0) + 1;
    onStack.set(area, depth);
    if (depth === 1 && functionName !== '(idle)' && functionName !== '(root)') inclusive.set(area, (inclusive.get(area) ?? 0) + subtree.get(node.id)!);
    for (const c of node.children ?? []) visit(byId.get(c)!);
    onStack.set(area, depth - 1);
  };
  visit(p.nodes[0]!);

  const lines = (m: Map<string, number>) =>
    [...m.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(([name, ms]) => ({ name, ms: Math.round(ms), pct: Math.round((1000 * ms) / busyMs) / 10 }));
  return { busyMs: Math.round(busyMs), idleMs: Math.round(idleMs), selfByFunction: lines(selfByFn), inclusiveByArea: lines(inclusive) };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const s = await summarizeProfile(process.argv[2]!, Number(process.argv[3] ?? 40));
  process.stdout.write(`busy ${s.busyMs} ms, idle ${s.idleMs} ms\n\nself time by function\n`);
  for (const l of s.selfByFunction) process.stdout.write(`${l.pct.toFixed(1).padStart(5)}%  ${l.name}\n`);
  process.stdout.write('\ninclusive time by area\n');
  for (const l of s.inclusiveByArea) process.stdout.write(`${l.pct.toFixed(1).padStart(5)}%  ${l.name}\n`);
}
