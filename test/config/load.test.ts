import { describe, expect, it, vi } from 'vitest';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseDocument, stringify } from 'yaml';
import {
  ConfigError,
  configReader,
  duplicateJsonKey,
  keepForReloads,
  loadConfigFile,
  loadConfigFileOffThread,
  parseConfig,
  substituteEnv,
} from '../../src/config/load.js';
import { compileTables } from '../../src/tables.js';
import { changesOf, tenantIds } from '../../src/config/tenant-ids.js';
import { linesById, tenantTexts } from '../../src/config/tenant-texts.js';
import type { RawTenant } from '../../src/config/schema.js';

// The YAML parser as it is, watched: which options the loader asks it for.
vi.mock('yaml', async (importOriginal) => {
  const yaml = await importOriginal<typeof import('yaml')>();
  return { ...yaml, parseDocument: vi.fn(yaml.parseDocument) };
});

const minimal = {
  plans: {
    free: {
      limits: { requestsPerSec: 1, requestBurst: 1, messagesPerSec: 1, messageBurst: 1, parkedPolls: 1, maxPayloadBytes: 1, maxBatch: 1 },
      quotas: { messagesPerMonth: 1, ingressBytesPerMonth: 1 },
      storageBytes: 1,
    },
  },
  tenants: { t: { plan: 'free', brokers: ['http://127.0.0.1:1/'] } },
};

function problemsOf(fn: () => unknown): string[] {
  try {
    fn();
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected a ConfigError');
}

describe('configuration', () => {
  it('loads config/default.yaml with no environment', async () => {
    const cfg = await loadConfigFile('config/default.yaml', {});
    expect(cfg.server.https.port).toBe(8443);
    expect(cfg.server.admin.token).toBeNull();
    expect(cfg.redis.url).toBeNull();
    expect(cfg.auth.secret).toBeNull();
    expect(cfg.tenants.default!.brokers).toEqual(['http://127.0.0.1:6632']);
    expect(compileTables(cfg).tenants[0]!.hosts).toEqual(['localhost', '127.0.0.1']);
  });

  it('substitutes ${VAR} and ${VAR:-default} as strings; an empty whole-value variable is null', () => {
    const problems: string[] = [];
    const out = substituteEnv({ a: '${P:-8443}', b: 'redis://${H}:6379', c: '${EMPTY:-}', d: ['${B:-true}'] }, { H: 'r1' }, problems);
    expect(out).toEqual({ a: '8443', b: 'redis://r1:6379', c: null, d: ['true'] });
    expect(problems).toEqual([]);
  });

  it('refuses trustProxy: true without trustedProxies, and trustedProxies entries that are no address or range', () => {
    expect(() => parseConfig({ ...minimal, server: { trustProxy: true } }, {})).toThrow(/trustProxy: true is replaced by server.trustedProxies/);
    expect(() => parseConfig({ ...minimal, server: { trustedProxies: ['10.0.0.0/8', 'lb.internal'] } }, {})).toThrow(
      /not an address or CIDR range: lb.internal/,
    );
  });

  it('types a whole-value variable only where the schema wants a number or boolean', () => {
    const cfg = parseConfig(
      {
        ...minimal,
        server: { https: { port: '${P}' }, trustProxy: '${TP}', trustedProxies: ['10.0.0.0/8'], admin: { token: '${TOKEN}' } },
        log: { accessLog: '${AL:-false}' },
        auth: { secret: '${S}' },
      },
      { P: '9443', TP: 'true', TOKEN: '12345', S: '0042' },
    );
    expect(cfg.server.https.port).toBe(9443);
    expect(cfg.server.trustProxy).toBe(true);
    expect(cfg.log.accessLog).toBe(false);
    expect(cfg.server.admin.token).toBe('12345');
    expect(cfg.auth.secret).toBe('0042');
  });

  it.each(['my-secret #part', '*starts-with-star', '@at-sign', '!tagged value', '0123456789', 'true', 'null', '[1, 2]', '{a: b}', "'quoted'", 'a: b'])(
    'keeps the secret %j exactly as the environment gave it',
    async (secret) => {
      const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
      const file = join(dir, 'c.yaml');
      await writeFile(file, 'server:\n  admin: { token: "${ADMIN}" }\nauth:\n  secret: ${JWT_SECRET}\nredis:\n  url: "${REDIS_URL}"\nplans: {}\ntenants: {}\n');
      const cfg = await loadConfigFile(file, { JWT_SECRET: secret, ADMIN: secret, REDIS_URL: secret });
      expect(cfg.auth.secret).toBe(secret);
      expect(cfg.server.admin.token).toBe(secret);
      expect(cfg.redis.url).toBe(secret);
    },
  );

  it("README's port tip works in config/default.yaml's flow style, quoted", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    const file = join(dir, 'c.yaml');
    await writeFile(file, 'server:\n  https: { host: 0.0.0.0, port: "${PORT:-8443}", cert: null, key: null }\nplans: {}\ntenants: {}\n');
    expect((await loadConfigFile(file, {})).server.https.port).toBe(8443);
    expect((await loadConfigFile(file, { PORT: '9443' })).server.https.port).toBe(9443);
  });

  it('names the variable a bad value came from and never prints the value', () => {
    const secret = '*hunter2-very-secret';
    const typed = problemsOf(() =>
      parseConfig({ ...minimal, server: { https: { port: '${EDGE_PORT}' } }, auth: { clockToleranceSec: '${SKEW}' } }, { EDGE_PORT: secret, SKEW: 'abc' }),
    );
    // Checked once the types are right: the cross-field rules.
    const refined = problemsOf(() => parseConfig({ ...minimal, auth: { defaultTenant: '${DT}' } }, { DT: secret }));
    const text = [...typed, ...refined].join('\n');
    expect(text).toContain('server.https.port (from ${EDGE_PORT}):');
    expect(text).toContain('auth.clockToleranceSec (from ${SKEW}):');
    expect(text).toContain('auth.defaultTenant (from ${DT}): unknown tenant "***"');
    expect(text).not.toContain('hunter2');
  });

  it('reports a variable with no value and no default by path', () => {
    expect(problemsOf(() => parseConfig({ ...minimal, auth: { secret: '${NOPE}' } }, {}))).toContain(
      'auth.secret: environment variable NOPE is not set and has no default',
    );
  });

  it('lists every problem with its path', () => {
    const problems = problemsOf(() =>
      parseConfig(
        { ...minimal, server: { https: { port: 'x' }, bodyLimitBytes: -1 }, tenants: { t: { plan: 'gold', brokers: ['ftp://x'] } }, nonsense: 1 },
        {},
      ),
    );
    const text = problems.join('\n');
    expect(text).toMatch(/server\.https\.port/);
    expect(text).toMatch(/server\.bodyLimitBytes/);
    expect(text).toMatch(/tenants\.t\.brokers\[0\]/);
    expect(text).toMatch(/nonsense|Unrecognized/);
    expect(problems.length).toBeGreaterThanOrEqual(4);
  });

  it('refuses a broker URL with a path, query or fragment, which undici could never open (before: every request 502 internal error)', () => {
    for (const broker of ['http://127.0.0.1:6632/queen', 'http://127.0.0.1:6632/?x=1', 'http://127.0.0.1:6632/#f']) {
      expect(problemsOf(() => parseConfig({ ...minimal, tenants: { t: { plan: 'free', brokers: [broker] } } }, {})).join('\n')).toMatch(
        /tenants\.t\.brokers\[0\]: a broker URL is scheme:\/\/host\[:port\] only/,
      );
    }
    expect(
      parseConfig({ ...minimal, tenants: { t: { plan: 'free', brokers: ['http://127.0.0.1:6632/', 'https://b.internal:8443'] } } }, {}).tenants.t!.brokers,
    ).toHaveLength(2);
  });

  it('refuses a tenant on an unknown plan and a host listed twice', () => {
    expect(problemsOf(() => parseConfig({ ...minimal, tenants: { t: { plan: 'gold', brokers: ['http://a'] } } }, {}))).toContain(
      'tenants.t.plan: unknown plan "gold"',
    );
    const cfg = parseConfig(
      { ...minimal, tenants: { a: { plan: 'free', brokers: ['http://a'], hosts: ['x'] }, b: { plan: 'free', brokers: ['http://b'], hosts: ['X'] } } },
      {},
    );
    expect(problemsOf(() => compileTables(cfg))).toEqual(['tenants.b.hosts: host "x" is already listed by tenant "a"']);
  });

  it('refuses at load a file tenant whose own auth repeats the global key without telling its tokens apart (it was dropped silently)', () => {
    const cfg = parseConfig(
      {
        ...minimal,
        auth: { secret: 'shared-secret-shared-secret-32b!' },
        tenants: { a: { plan: 'free', brokers: ['http://a'], auth: { secret: 'shared-secret-shared-secret-32b!' } } },
      },
      {},
    );
    expect(problemsOf(() => compileTables(cfg)).join('\n')).toMatch(/^tenants\.a/);
  });

  it('refuses admin allowedHosts that are not bare host names (they would never match a Host)', () => {
    const problems = problemsOf(() =>
      parseConfig({ ...minimal, server: { admin: { allowedHosts: ['admin.ns.svc', 'http://admin.ns.svc', 'admin.ns.svc:9090', '*.svc', ''] } } }, {}),
    );
    expect(problems.filter((p) => p.startsWith('server.admin.allowedHosts'))).toEqual(
      [1, 2, 3, 4].map((i) => `server.admin.allowedHosts[${i}]: a host name, without scheme, port or path`),
    );
  });

  it('reports YAML syntax errors and missing files', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    await writeFile(join(dir, 'bad.yaml'), 'server: [unclosed\n');
    await expect(loadConfigFile(join(dir, 'bad.yaml'), {})).rejects.toBeInstanceOf(ConfigError);
    await expect(loadConfigFile(join(dir, 'missing.yaml'), {})).rejects.toBeInstanceOf(ConfigError);
  });

  it('reads a .json file with JSON.parse: the same configuration, ${VAR} semantics and problems as its YAML twin', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    const doc = { ...minimal, server: { https: { port: '${PORT:-8443}' } }, auth: { secret: '${S}' } };
    await writeFile(join(dir, 'c.json'), JSON.stringify(doc));
    await writeFile(join(dir, 'c.yaml'), stringify(doc));
    const env = { S: '*secret #1', PORT: '9443' };
    const fromJson = await loadConfigFile(join(dir, 'c.json'), env);
    expect(fromJson).toEqual(await loadConfigFile(join(dir, 'c.yaml'), env));
    expect(fromJson.server.https.port).toBe(9443);
    expect(fromJson.auth.secret).toBe('*secret #1');
    const bad = { ...minimal, tenants: { t: { plan: 'gold', brokers: ['${B}'] } } };
    await writeFile(join(dir, 'bad.json'), JSON.stringify(bad));
    await writeFile(join(dir, 'bad.yaml'), stringify(bad));
    const refusal = async (f: string): Promise<readonly string[]> => {
      const err = await loadConfigFile(join(dir, f), { B: 'ftp://hunter2' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigError);
      return (err as ConfigError).problems;
    };
    const problems = await refusal('bad.json');
    expect(problems).toEqual(await refusal('bad.yaml'));
    expect(problems.join('\n')).toContain('tenants.t.brokers[0] (from ${B})');
    expect(problems.join('\n')).not.toContain('hunter2');
  });

  it('refuses a key given twice in one mapping, in JSON and in YAML, naming where', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    await writeFile(join(dir, 'dup.json'), '{"plans": {}, "tenants": {"a": {"plan": "x"}, "b": [1, {"k": 1}], "a": {}}}');
    await writeFile(join(dir, 'dup.yaml'), 'plans: {}\ntenants:\n  a: { plan: x }\n  b: { plan: y }\n  a: { plan: z }\n');
    await writeFile(join(dir, 'syntax.json'), '{"plans": {},}');
    await expect(loadConfigFile(join(dir, 'dup.json'), {})).rejects.toThrow(/dup\.json: tenants: key "a" given twice/);
    await expect(loadConfigFile(join(dir, 'dup.yaml'), {})).rejects.toThrow(/dup\.yaml: Map keys must be unique at line 5, column 3: a/);
    await expect(loadConfigFile(join(dir, 'syntax.json'), {})).rejects.toThrow(/syntax\.json: .*JSON/);
  });

  it('finds duplicate JSON keys by path, through escapes and arrays', () => {
    expect(duplicateJsonKey('{"a": "x\\"", "b": {"c": 1, "c\\u0041": 2}}')).toBeNull();
    expect(duplicateJsonKey('{"a": [{"k": 1}, {"k": 1, "j": "\\\\", "k": 2}]}')).toEqual({ path: 'a[1]', key: 'k' });
    expect(duplicateJsonKey('{"a": {"b\\"": 1, "b\\u0022": 2}}')).toEqual({ path: 'a', key: 'b"' });
    expect(duplicateJsonKey('[1, "{", {"x": 1}]')).toBeNull();
  });

  it("reads a YAML mapping of 20,000 keys without the parser's own duplicate-key check, which compares each key with every earlier one", async () => {
    // That check made a 100,000-tenant file take minutes; the loader's one pass over each mapping
    // finds duplicates instead (the test above). The time itself is measured by
    // bench/many-tenants.ts.
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    const names = Array.from({ length: 20_000 }, (_, i) => `r${i}`);
    await writeFile(join(dir, 'map.yaml'), `plans: {}\ntenants: {}\nqueryAllow:\n${names.map((r) => `  ${r}: []`).join('\n')}\n`);
    vi.mocked(parseDocument).mockClear();
    const config = await loadConfigFile(join(dir, 'map.yaml'), {});
    expect(Object.keys(config.queryAllow)).toHaveLength(names.length);
    expect(vi.mocked(parseDocument)).toHaveBeenCalledTimes(1);
    expect(vi.mocked(parseDocument).mock.calls[0]![1]).toMatchObject({ uniqueKeys: false });
  });

  it('reads a file on a worker thread (a reload) to the same configuration, and its problems as a ConfigError', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    const tenants: Record<string, unknown> = {};
    for (let i = 0; i < 1200; i++) tenants[`t${i}`] = { plan: 'free', hosts: [`t${i}.example`], brokers: ['http://127.0.0.1:1'] };
    await writeFile(join(dir, 'c.json'), JSON.stringify({ ...minimal, auth: { secret: '${S}' }, tenants }));
    const env = { S: 'secret-from-env' };
    const off = await loadConfigFileOffThread(join(dir, 'c.json'), env);
    expect(off).toEqual(await loadConfigFile(join(dir, 'c.json'), env));
    expect(Object.keys(off.tenants)).toEqual(Object.keys(tenants));
    const err = await loadConfigFileOffThread(join(dir, 'c.json'), {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).problems).toEqual(['auth.secret: environment variable S is not set and has no default']);
  });

  it('sends a read again as the changes from the last one: equal tenants are the same objects, the changed ones listed', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    const file = join(dir, 'c.json');
    const tenants: Record<string, Record<string, unknown>> = {};
    for (let i = 0; i < 1200; i++) tenants[`t${i}`] = { plan: 'free', hosts: [`t${i}.example`], brokers: ['http://127.0.0.1:1'] };
    await writeFile(file, JSON.stringify({ ...minimal, tenants }));
    const first = await loadConfigFileOffThread(file, {});

    // One changed, one removed, one added; then a file that is refused, which changes nothing.
    const { t7: _removed, ...kept } = tenants;
    const next = { ...kept, t3: { ...tenants.t3, status: 'suspended' }, added: { plan: 'free', brokers: ['http://127.0.0.1:1'] } };
    await writeFile(file, JSON.stringify({ ...minimal, tenants: { ...next, bad: { plan: 'none' } } }));
    await expect(loadConfigFileOffThread(file, {})).rejects.toBeInstanceOf(ConfigError);
    await writeFile(file, JSON.stringify({ ...minimal, tenants: next }));
    const second = await loadConfigFileOffThread(file, {});

    expect(second).toEqual(await loadConfigFile(file, {}));
    expect(tenantIds(second.tenants)).toEqual(Object.keys(second.tenants));
    expect(second.tenants.t0).toBe(first.tenants.t0);
    expect(second.tenants.t3).not.toBe(first.tenants.t3);
    expect(second.tenants.t3!.status).toBe('suspended');
    expect(changesOf(second.tenants)).toEqual({ base: first.tenants, changed: ['t3', 'added', 't7'] });
    expect(changesOf(second.tenants)!.base).toBe(first.tenants);

    // The start's file, read on this thread and kept: the first reload's read is sent against it.
    const started = await loadConfigFile(file, {});
    keepForReloads(started.tenants);
    const third = await loadConfigFileOffThread(file, {});
    expect(changesOf(third.tenants)).toEqual({ base: started.tenants, changed: [] });
    expect(third.tenants.t0).toBe(started.tenants.t0);
  });

  it('a reader thread that dies fails the read on it and the one queued behind it, each with a clear error; the next read starts a new thread', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-cfg-'));
    const file = join(dir, 'c.json');
    await writeFile(file, JSON.stringify({ ...minimal, tenants: { a: { plan: 'free', brokers: ['http://127.0.0.1:1'] } } }));
    await loadConfigFileOffThread(file, {});
    const dying = configReader()!;
    const inFlight = loadConfigFileOffThread(file, {});
    const queued = loadConfigFileOffThread(file, {});
    const ended = dying.terminate();
    await expect(inFlight).rejects.toThrow('configuration reader thread exited with code 1 during the read; the next read starts a new one');
    // Without the check, this read was posted to the dead thread and never settled.
    await expect(queued).rejects.toThrow('configuration reader thread exited before this read began; the next read starts a new one');
    await ended;
    expect(await loadConfigFileOffThread(file, {})).toEqual(await loadConfigFile(file, {}));
    expect(configReader()).not.toBeNull();
    expect(configReader()).not.toBe(dying);
  }, 8000);

  it('keeps tenants as shared text, one line each, whatever their ids hold', () => {
    const tenants = { plain: { plan: 'a' }, 'tab\there': { plan: 'b' }, 'line\n"q"': { plan: 'c' } } as unknown as Record<string, RawTenant>;
    const lines = linesById(tenantTexts(tenants, Object.keys(tenants)));
    expect([...lines.keys()].map((k) => JSON.parse(k) as string)).toEqual(Object.keys(tenants));
    expect(lines.get(JSON.stringify('tab\there'))).toBe(`${JSON.stringify('tab\there')}\t{"plan":"b"}`);
    expect(linesById(tenantTexts({}, [])).size).toBe(0);
  });
});
