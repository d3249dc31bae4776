import { describe, expect, it } from 'vitest';
import { categoryOf, tally } from '../../bench/perf-split.js';

describe('bench/perf-split: perf samples by kind of code', () => {
  it('puts each kind of symbol in its category, helper threads apart', () => {
    const main = (symbol: string, dso = 'node', kernel = false) => categoryOf({ main: true, dso, symbol, kernel });
    expect(main('__tcp_transmit_skb', '[kernel.kallsyms]', true)).toBe('kernel');
    expect(main('JS:*finish file:///work/main/dist/pipeline.js:69:20', '[JIT] tid 1')).toBe('js: edge (or floor)');
    expect(main('JS:*finish file:///work/main/node_modules/.cache/queen-edge-bench-1/dist/pipeline.js:89:20', '[JIT] tid 1')).toBe('js: edge (or floor)');
    expect(main('JS:*parse /work/main/node_modules/pino/lib/tools.js:1:1', '[JIT] tid 1')).toBe('js: other packages');
    expect(main('JS:*writeH1 /work/main/node_modules/undici/lib/dispatcher/client-h1.js:1144:18', '[JIT] tid 1')).toBe('js: undici');
    expect(main('JS:wasm-function[20]-20-turbofan', '[JIT] tid 1')).toBe('js: llhttp (wasm, undici)');
    expect(main('JS:*clearBuffer node:internal/streams/writable:744:21', '[JIT] tid 1')).toBe('js: node');
    expect(main('Builtins_LoadIC')).toBe('v8: builtins');
    expect(main('v8::internal::ScavengerCollector::CollectGarbage')).toBe('gc (main thread)');
    expect(main('v8::internal::String::ComputeAndSetRawHash')).toBe('v8: runtime');
    expect(main('node::performance::FastPerformanceNow')).toBe('node c++ and libuv');
    expect(main('aesni_encrypt')).toBe('openssl');
    expect(main('_int_malloc', 'libc.so.6')).toBe('libc');
    expect(main('RegExp:[^\\t\\x20-\\x7e\\x80-\\xff]', '[JIT] tid 1')).toBe('regexp');
    expect(categoryOf({ main: false, dso: 'node', symbol: 'v8::internal::ConcurrentMarking::RunMajor', kernel: false })).toBe('gc (helper threads)');
    expect(categoryOf({ main: false, dso: 'node', symbol: 'uv__io_poll', kernel: false })).toBe('other threads');
  });

  it("sums perf report's periods per process, by category and by symbol, and skips threads of other processes", () => {
    const report = [
      '# comment',
      '   3000000  100:node     node               [.] Builtins_LoadIC',
      '   1000000  100:node     [JIT] tid 100      [.] JS:*handle file:///x/dist/pipeline.js:40:26',
      '   2000000  101:node     node               [.] v8::internal::Scavenger::ScavengeObject',
      '   5000000  200:node     [kernel.kallsyms]  [k] tcp_sendmsg_locked',
      '   9000000  300:node     node               [.] Builtins_LoadIC',
    ].join('\n');
    const t = tally(
      report,
      new Map([
        [100, 100],
        [101, 100],
        [200, 200],
      ]),
    );
    expect([...t.keys()].sort()).toEqual([100, 200]);
    expect(Object.fromEntries(t.get(100)!.byCategory)).toEqual({
      'v8: builtins': 3_000_000,
      'js: edge (or floor)': 1_000_000,
      'gc (helper threads)': 2_000_000,
    });
    expect(Object.fromEntries(t.get(200)!.byCategory)).toEqual({ kernel: 5_000_000 });
    expect(t.get(100)!.bySymbol.get('v8: builtins\tBuiltins_LoadIC')).toBe(3_000_000);
  });
});
