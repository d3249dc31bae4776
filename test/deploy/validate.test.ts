/** `queen-edge validate`: checks a file without serving; every problem with its path and a hint, exit 0 or 2. */
import { lookup } from 'node:dns/promises';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { TEST_PLAN, testConfig } from '../helpers/edge.js';
import { connectionRefused, edgeTracker, freePort } from './edge-process.js';

const edges = edgeTracker();
afterEach(() => edges.cleanup());

// Each test starts the CLI under tsx: seconds on a loaded machine.
describe('queen-edge validate', { timeout: 60_000 }, () => {
  it('a valid file: one line, exit 0, and no listener is opened', async () => {
    const port = await freePort();
    const edge = await edges.start(testConfig(['http://127.0.0.1:1'], { server: { https: { port } } }), ['validate', '--config', '{config}']);
    expect((await edge.exited).code).toBe(0);
    expect(edge.lines.map((l) => l.msg)).toEqual([expect.stringMatching(/config\.yaml: valid \(1 tenant, 1 plan\)$/)]);
    expect(await connectionRefused(port)).toBe(true);
  });

  it('an invalid file: every problem with its path and a hint, an empty variable called empty, exit 2', async () => {
    const edge = await edges.start(
      { server: { bogus: 1, https: { port: 'x' } }, redis: { url: '${EMPTY_URL}' }, plans: {}, tenants: { t: { plan: 'free', brokers: ['nope'] } } },
      ['validate', '--config', '{config}'],
      { EMPTY_URL: '' },
    );
    expect((await edge.exited).code).toBe(2);
    const err = edge.stderr();
    expect(err).toMatch(/config\.yaml: 4 problems\n/);
    expect(err).toContain('redis.url: environment variable EMPTY_URL is empty and has no default\n    hint: export EMPTY_URL=');
    expect(err).toContain('server: Unrecognized key: "bogus"\n    hint: remove it or fix its spelling');
    expect(err).toContain('server.https.port: Invalid input: expected number, received string\n    hint: write a number');
    expect(err).toContain('tenants.t.brokers[0]: Invalid URL\n    hint: a full URL with its scheme');
  });

  it("the directory's rules: ids that differ only in case, a broker two tenants list (by credentials, by address and name); a URL's credentials never printed", async () => {
    // The machine's own name and the address it resolves to: two spellings of one broker.
    const name = hostname().toLowerCase();
    const { address } = (await lookup(name, { all: true }))[0]!;
    const literal = address.includes(':') ? `[${address}]` : address;
    const withCredentials = 'http://edge-user:${BROKER_PASSWORD}@127.0.0.1:1';
    const tenant = (host: string, broker: string) => ({ plan: 'test', hosts: [host], brokers: [broker] });
    // Written as is (the ${VAR} is the CLI's to substitute).
    const config = {
      plans: { test: TEST_PLAN },
      tenants: {
        acme: tenant('acme.localhost', 'http://127.0.0.1:2'),
        ACME: tenant('big.localhost', 'http://127.0.0.1:3'),
        one: tenant('one.localhost', withCredentials),
        two: tenant('two.localhost', withCredentials),
        'by-address': tenant('by-address.localhost', `http://${literal}:4`),
        'by-name': tenant('by-name.localhost', `http://${name}:4`),
      },
    };
    const edge = await edges.start(config, ['validate', '--config', '{config}'], { BROKER_PASSWORD: 'pw-9d2e71' });
    expect((await edge.exited).code).toBe(2);
    const err = edge.stderr();
    expect(err).toContain('tenants.ACME.id: tenant "ACME" differs from tenant "acme" only in case');
    expect(err).toContain('tenants.two.brokers: tenant "two" and tenant "one" both list broker "http://***@127.0.0.1:1"');
    expect(err).toMatch(
      new RegExp(
        `tenants\\.by-name\\.brokers: tenant "by-name" and tenant "by-address" both list broker "http://${name.replace(/\./g, '\\.')}:4" \\(host and port [^,]+:4, address [^)]+:4\\)`,
      ),
    );
    expect(err).not.toContain('pw-9d2e71');
  });

  it('checks the files the start reads: a missing or non-PEM certificate, a missing key, a missing public key, each with its path and a hint, exit 2', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-validate-'));
    try {
      const notPem = join(dir, 'not-pem.crt');
      await writeFile(notPem, 'this is not a certificate\n');
      const edge = await edges.start(
        testConfig(['http://127.0.0.1:1'], {
          server: {
            https: { cert: join(dir, 'missing.crt'), key: join(dir, 'missing.key'), sni: [{ servername: 'b.example', cert: notPem, key: join(dir, 'b.key') }] },
          },
          tenants: { acme: { auth: { publicKey: join(dir, 'idp.pem') } } },
        }),
        ['validate', '--config', '{config}'],
      );
      expect((await edge.exited).code).toBe(2);
      const err = edge.stderr();
      expect(err).toMatch(/config\.yaml: 5 problems\n/);
      expect(err).toContain(`server.https.cert: ${dir}/missing.crt: no such file\n    hint: the file must be readable where the edge runs`);
      expect(err).toContain(`server.https.key: ${dir}/missing.key: no such file\n    hint: the file must be readable`);
      expect(err).toContain(`server.https.sni[0].cert: ${notPem}: not a PEM certificate\n    hint: a PEM file (-----BEGIN CERTIFICATE-----)`);
      expect(err).toContain(`server.https.sni[0].key: ${dir}/b.key: no such file\n`);
      expect(err).toContain(`tenants.acme.auth.publicKey: ${dir}/idp.pem: no such file\n`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("prints the start's warnings, and still exits 0", async () => {
    const edge = await edges.start(testConfig(['http://127.0.0.1:1'], { auth: { secret: null } }), ['validate', '--config', '{config}']);
    expect((await edge.exited).code).toBe(0);
    expect(edge.stderr()).toContain(
      'queen-edge: warning: no JWT key configured (auth.secret, auth.publicKey or auth.jwksUrl): every authenticated route answers 401\n',
    );
    expect(edge.stderr()).toContain('queen-edge: warning: no server.https.cert configured: serving a generated self-signed certificate');
  });

  it('Redis without store.url: warns that admin writes, keys and usage live only in Redis; not once the store is set', async () => {
    const redisOnly = testConfig(['http://127.0.0.1:1'], { redis: { url: 'redis://127.0.0.1:1' } });
    const warned = await edges.start(redisOnly, ['validate', '--config', '{config}']);
    expect((await warned.exited).code).toBe(0);
    expect(warned.stderr()).toContain(
      'queen-edge: warning: Redis is configured without store.url: admin writes (tenants, plans, suspensions, storage), API keys and metered usage live only in Redis',
    );
    const stored = await edges.start({ ...redisOnly, store: { ...redisOnly.store, url: 'postgres://127.0.0.1:1/x' } }, ['validate', '--config', '{config}']);
    expect((await stored.exited).code).toBe(0);
    expect(stored.stderr()).not.toContain('without store.url');
  });

  it('the start reports the same problems, one line each, never a stack trace, and exits 2', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-validate-'));
    try {
      const edge = await edges.start(
        testConfig(['http://127.0.0.1:1'], { server: { https: { cert: join(dir, 'missing.crt'), key: join(dir, 'missing.key') } } }),
      );
      expect((await edge.exited).code).toBe(2);
      const err = edge.stderr();
      expect(err).toMatch(/config\.yaml: 2 problems\n/);
      expect(err).toContain(`server.https.cert: ${dir}/missing.crt: no such file\n`);
      expect(err).not.toMatch(/^\s+at /m);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('an unquoted ${VAR} in a flow mapping: the YAML error once, with the hint to quote it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'qe-validate-'));
    const file = join(dir, 'edge.yaml');
    await writeFile(file, 'server:\n  https: { host: 0.0.0.0, port: ${PORT:-8443} }\nplans: {}\ntenants: {}\n');
    try {
      const edge = await edges.start({}, ['validate', '--config', file]);
      expect((await edge.exited).code).toBe(2);
      const err = edge.stderr();
      expect(err).toContain('1 problem\n');
      expect(err).toContain('at line 2, column 34');
      expect(err).toContain('hint: a ${VAR} inside { ... } must be quoted: port: "${PORT:-8443}"');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
