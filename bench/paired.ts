/**
 * Paired A/B of two edge builds: both run at the same time, plain forwarding (no Redis, no access
 * log; with --full, the full pipeline: each side its own Redis, access log and metering on), loaded
 * by identical clients at the same moment, so whatever else the machine does weighs on both alike. Prints CPU µs per request of each and B/A per workload, and the medians.
 *
 * Runs started together are not symmetric: measured with the same build on both sides, B came out
 * 5-15 % cheaper than A on this machine, or dearer on another day. Run both orders and take the
 * geometric mean of the two B/A medians (BENCHMARKS.md, "Measuring a change"). --alternate loads
 * one side at a time instead, the first side alternating each round: no asymmetry, but whatever
 * else runs weighs on the sides at different moments. --a-config / --b-config pair a setting, --a-node / --b-node a Node or V8 flag.
 * Each tenant is on a broker of its own (bench/edge.ts), so builds of different ages read one config.
 * `--a floor` (or `--b floor`) is the floor forwarder of `npm run bench` instead of a build: the
 * edge's floor ratio, taken with both loaded at the same moment.
 *
 *   npx tsc -p tsconfig.build.json --outDir node_modules/.cache/ab-new          # this checkout
 *   git worktree add /tmp/ab-old <commit> && npx tsc -p /tmp/ab-old/tsconfig.build.json \
 *     --outDir node_modules/.cache/ab-old                                        # the other one
 *   npx tsx bench/paired.ts --a node_modules/.cache/ab-old --b node_modules/.cache/ab-new --proto h2
 *
 * The builds live under node_modules so their imports resolve to this checkout's packages.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startFastDouble } from './double.js';
import { BENCH_TENANT, prepareBenchModule, startEdgeProcess } from './edge.js';
import { runH2Load } from './h2load.js';
import { runLoad, type Workload } from './load.js';
import { makeCertificate, stopChild, treeCpuSeconds } from './procs.js';
import { sideConfig, startReporting, token, workloads } from './run.js';
import { PrivateRedis } from '../test/helpers/redis.js';

const { values: v } = parseArgs({
  options: {
    a: { type: 'string' },
    b: { type: 'string' },
    proto: { type: 'string', default: 'h1' },
    repeat: { type: 'string', default: '3' },
    seconds: { type: 'string', default: '8' },
    full: { type: 'boolean', default: false },
    // Load one side at a time, alternating which goes first each round, instead of both at once.
    alternate: { type: 'boolean', default: false },
    // JSON merged into one side's config (per top-level section), to pair a setting against its default.
    'a-config': { type: 'string', default: '{}' },
    'b-config': { type: 'string', default: '{}' },
    // Node options of one side's process (space-separated), to pair a V8 or Node flag against none.
    'a-node': { type: 'string', default: '' },
    'b-node': { type: 'string', default: '' },
  },
});
if (!v.a || !v.b)
  throw new Error(
    'usage: bench/paired.ts --a <dist dir>|floor --b <dist dir>|floor [--proto h1|h2] [--repeat N] [--seconds S] [--full] [--alternate] [--a-config JSON] [--b-config JSON] [--a-node FLAGS] [--b-node FLAGS]',
  );
const repeat = Math.max(1, Number(v.repeat));
const seconds = Math.max(1, Number(v.seconds));

const dir = mkdtempSync(join(tmpdir(), 'queen-edge-paired-'));
const { cert, key } = await makeCertificate(dir);
const double = await startFastDouble(0);
const brokerUrl = `http://127.0.0.1:${double.port}`;
const jwt = await token({ roles: ['read-write'], tenant: BENCH_TENANT });
const headers = { authorization: `Bearer ${jwt}` };

/** A measured side: an edge build, or the floor. */
interface Side {
  readonly pid: number;
  readonly base: string;
  stop(): Promise<void>;
}

const redises: PrivateRedis[] = [];
async function start(name: string, dist: string, overrides: string, nodeOptions: string): Promise<Side> {
  if (dist === 'floor') {
    // The floor forwarder of `npm run bench` (bench/floor.ts), for a floor ratio taken at the same moment.
    const entry = await prepareBenchModule('floor', false);
    const floor = await startReporting([...entry, cert, key, brokerUrl, v.proto === 'h2' ? 'h2' : 'h1'], 'floor forwarder');
    return { pid: floor.child.pid!, base: `https://127.0.0.1:${floor.port}`, stop: () => stopChild(floor.child) };
  }
  // --full: each side gets its own Redis (one shared server would make the sides wait on each other).
  const redis = v.full ? await PrivateRedis.start() : null;
  if (redis) redises.push(redis);
  const config = await sideConfig({ cert, key, brokerUrl, redisUrl: redis?.url ?? null, full: v.full });
  for (const [section, value] of Object.entries(JSON.parse(overrides) as Record<string, Record<string, unknown>>)) {
    config[section] = { ...(config[section] as Record<string, unknown>), ...value };
  }
  const flags = nodeOptions.split(' ').filter((f) => f !== '');
  return startEdgeProcess(name, config, { dir, entry: [process.execPath, ...flags, join(resolve(dist), 'cli.js')] });
}

const load = (base: string, w: Workload) =>
  v.proto === 'h2' ? runH2Load(base, w, { clients: 2, streams: 100, seconds, headers }) : runLoad(base, w, { connections: 50, seconds, headers });
interface Measured {
  readonly us: number;
  readonly reqPerSec: number;
}
/** One side's CPU µs per request over one load. */
async function measured(e: Side, w: Workload): Promise<Measured> {
  const cpu = treeCpuSeconds(e.pid);
  const r = await load(e.base, w);
  return { us: ((treeCpuSeconds(e.pid) - cpu) / r.requests) * 1e6, reqPerSec: r.reqPerSec };
}
const a = await start('A', v.a, v['a-config'], v['a-node']);
const b = await start('B', v.b, v['b-config'], v['b-node']);
const perWorkload = new Map<string, { a: number[]; b: number[] }>();
try {
  for (let r = 0; r < repeat; r++) {
    for (const w of workloads()) {
      const [ra, rb] = v.alternate
        ? r % 2 === 0
          ? [await measured(a, w), await measured(b, w)]
          : ([await measured(b, w), await measured(a, w)].reverse() as [Measured, Measured])
        : await Promise.all([measured(a, w), measured(b, w)]);
      const usA = ra.us;
      const usB = rb.us;
      const row = perWorkload.get(w.name) ?? { a: [], b: [] };
      row.a.push(usA);
      row.b.push(usB);
      perWorkload.set(w.name, row);
      console.log(
        `${w.name.padEnd(10)} A ${usA.toFixed(1)} µs/req (${ra.reqPerSec.toFixed(0)}/s)  B ${usB.toFixed(1)} µs/req (${rb.reqPerSec.toFixed(0)}/s)  B/A ${(usB / usA).toFixed(3)}`,
      );
    }
  }
} finally {
  await Promise.all([a.stop(), b.stop()]);
  await Promise.all(redises.map((r) => r.kill()));
  await double.close();
}
const median = (x: readonly number[]) => [...x].sort((p, q) => p - q)[Math.floor((x.length - 1) / 2)]!;
for (const [name, row] of perWorkload) {
  console.log(`median ${name.padEnd(10)} A ${median(row.a).toFixed(1)}  B ${median(row.b).toFixed(1)}  B/A ${(median(row.b) / median(row.a)).toFixed(3)}`);
}
