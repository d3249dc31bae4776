/**
 * The Helm chart without helm: its plain YAML parses, values.yaml satisfies values.schema.json,
 * every template is non-empty and reads only `.Values` keys that values.yaml defines, and the
 * queen-edge config the ConfigMap renders (values.config, verbatim) is valid for queen-edge with
 * and without the environment the Deployment sets.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { Ajv } from 'ajv';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startApp } from '../../src/app.js';
import { parseConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/observability/log.js';
import { startBrokerDouble } from '../helpers/broker-double.js';

const CHART = resolve(import.meta.dirname, '../../helm/queen-edge');
const read = (p: string): string => readFileSync(join(CHART, p), 'utf8');
const values = parse(read('values.yaml')) as Record<string, unknown> & { config: any };
/** The defaults plus what values.schema.json requires: one tenant with a broker, and a JWT secret. */
const working = {
  ...values,
  secrets: { ...(values.secrets as object), jwtSecret: 'a-jwt-secret-of-some-length' },
  config: { ...values.config, tenants: { default: { plan: 'free', brokers: ['http://queen:6632'] } } },
} as any;
const templates = readdirSync(join(CHART, 'templates')).map((f) => ({ name: f, text: read(join('templates', f)) }));

/** `.Values.a.b.c` references in a template, as key paths. */
function valueRefs(text: string): string[][] {
  return [...text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)].map((m) => m[1]!.slice(1).split('.'));
}

function hasPath(obj: unknown, path: string[]): boolean {
  let node = obj;
  for (const key of path) {
    if (node === null || typeof node !== 'object' || !(key in node)) return false;
    node = (node as Record<string, unknown>)[key];
  }
  return true;
}

describe('helm/queen-edge', () => {
  it('Chart.yaml and values.yaml parse, and the chart names its app version', () => {
    const chart = parse(read('Chart.yaml')) as Record<string, unknown>;
    expect(chart).toMatchObject({ apiVersion: 'v2', name: 'queen-edge', type: 'application' });
    const pkg = JSON.parse(readFileSync(resolve(CHART, '../../package.json'), 'utf8')) as { version: string };
    expect(chart.appVersion).toBe(pkg.version);
    expect(values).toBeTypeOf('object');
  });

  it('values.schema.json refuses the defaults, naming what a Ready release needs; accepts them with a tenant and a key', () => {
    // verbose: each error carries its schema, whose title is the message a person reads.
    const ajv = new Ajv({ allErrors: true, strict: false, verbose: true });
    const validate = ajv.compile(JSON.parse(read('values.schema.json')) as object);
    expect(validate(values)).toBe(false);
    const titles = (validate.errors ?? []).map((e) => e.parentSchema?.title).filter(Boolean).join('\n');
    expect(titles).toContain('set config.tenants');
    expect(titles).toContain('set a JWT key source');
    expect(validate(working), JSON.stringify(validate.errors)).toBe(true);
    // Redis instead of file tenants; a public key instead of a secret.
    expect(validate({ ...values, redis: { url: 'redis://r:6379' }, config: { ...values.config, auth: { ...values.config.auth, publicKey: '/k.pem' } } })).toBe(true);
    expect(validate({ ...working, config: { ...working.config, tenants: { t: { plan: 'free', brokers: [] } } } })).toBe(false);
    expect(validate({ ...working, service: { type: 'Ingress', port: 443 } })).toBe(false);
    expect(validate({ ...working, replicaCount: 0 })).toBe(false);
    expect(validate({ ...working, typo: true })).toBe(false);
  });

  it('the config the chart renders from the least working values becomes Ready', async () => {
    const broker = await startBrokerDouble({ name: 'helm' });
    // As the ConfigMap holds it, with the broker pointed at the double and the ports freed (the only test changes).
    const rendered = structuredClone(working.config);
    rendered.tenants.default.brokers = [broker.url];
    for (const l of ['https', 'http', 'admin'] as const) if (rendered.server[l].port !== null) rendered.server[l] = { ...rendered.server[l], host: '127.0.0.1', port: 0 };
    rendered.log.level = 'silent';
    // The environment the Deployment sets from the chart's Secret.
    const app = await startApp(parseConfig(rendered, { JWT_SECRET: working.secrets.jwtSecret }), { log: silentLogger() });
    try {
      const res = await request(`http://127.0.0.1:${app.addresses.admin!.port}/readyz`);
      expect(res.statusCode, await res.body.text()).toBe(200);
    } finally {
      await app.close(0);
      await broker.close();
    }
  });

  it('every template is non-empty and references only keys values.yaml defines', () => {
    expect(templates.map((t) => t.name)).toEqual(expect.arrayContaining([
      'deployment.yaml', 'service.yaml', 'admin-service.yaml', 'configmap.yaml', 'secret.yaml', 'tls-secret.yaml', 'hpa.yaml', 'pdb.yaml', 'servicemonitor.yaml',
    ]));
    for (const t of templates) {
      expect(t.text.trim().length, t.name).toBeGreaterThan(0);
      for (const ref of valueRefs(t.text)) expect(hasPath(values, ref), `${t.name}: .Values.${ref.join('.')}`).toBe(true);
    }
  });

  it('the Deployment probes the admin /livez and /readyz and uses the configured ports', () => {
    const d = templates.find((t) => t.name === 'deployment.yaml')!.text;
    expect(d).toMatch(/livenessProbe:\s+httpGet: \{ path: \/livez, port: admin \}/);
    expect(d).toMatch(/readinessProbe:[\s\S]*?httpGet: \{ path: \/readyz, port: admin \}/);
    expect(d).toContain('containerPort: {{ .Values.config.server.admin.port }}');
    expect(d).toContain('containerPort: {{ .Values.config.server.https.port }}');
    expect(d).toContain('terminationGracePeriodSeconds: {{ include "queen-edge.terminationGracePeriodSeconds" . }}');
    expect(d).toContain('checksum/config:');
  });

  it('the ConfigMap renders values.config verbatim, and that is a valid queen-edge config', () => {
    const cm = templates.find((t) => t.name === 'configmap.yaml')!.text;
    expect(cm).toContain('{{- toYaml .Values.config | nindent 4 }}');
    // Nothing set: self-signed, no Redis, one process.
    const bare = parseConfig(values.config, {});
    expect(bare.server.https.cert).toBeNull();
    expect(bare.redis.url).toBeNull();
    expect(bare.server.admin.host).toBe('0.0.0.0');
    // What the Deployment sets with a TLS secret and a Redis URL.
    const full = parseConfig(values.config, {
      QUEEN_EDGE_TLS_CERT: '/etc/queen-edge/tls/tls.crt',
      QUEEN_EDGE_TLS_KEY: '/etc/queen-edge/tls/tls.key',
      QUEEN_EDGE_REDIS_URL: 'redis://redis:6379/0',
      JWT_SECRET: 'secret',
      QUEEN_EDGE_ADMIN_TOKEN: 'token',
    });
    expect(full.server.https).toMatchObject({ cert: '/etc/queen-edge/tls/tls.crt', key: '/etc/queen-edge/tls/tls.key' });
    expect(full.redis.url).toBe('redis://redis:6379/0');
    expect(full.auth.secret).toBe('secret');
  });

  it('the admin Service reaches pods that are not Ready; an existing Secret is part of the pod checksum', () => {
    expect(templates.find((t) => t.name === 'admin-service.yaml')!.text).toMatch(/^ {2}publishNotReadyAddresses: true$/m);
    const d = templates.find((t) => t.name === 'deployment.yaml')!.text;
    expect(d).toContain('checksum/secret: {{ (lookup "v1" "Secret" .Release.Namespace .Values.secrets.existingSecret).data | toJson | sha256sum }}');
  });

  it('the Deployment passes each ${VAR} the config reads', () => {
    const d = templates.find((t) => t.name === 'deployment.yaml')!.text;
    const vars = new Set([...JSON.stringify(values.config).matchAll(/\$\{([A-Z_]+)/g)].map((m) => m[1]!));
    expect(vars.size).toBeGreaterThan(0);
    for (const v of vars) expect(d, v).toContain(`- name: ${v}`);
  });
});
