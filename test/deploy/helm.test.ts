/**
 * The Helm chart without helm: its plain YAML parses, values.yaml satisfies values.schema.json,
 * every template is non-empty and reads only `.Values` keys that values.yaml defines, and the
 * queen-edge config the ConfigMap renders (values.config, verbatim) is valid for queen-edge with
 * and without the environment the Deployment sets. helm is not installed here, so the templates
 * are checked as text: what each optional resource is guarded by, and what it must contain.
 */
import { lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
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
/** The defaults plus what values.schema.json requires: an image, one tenant with a broker, and a JWT secret. */
const working = {
  ...values,
  image: { ...(values.image as object), repository: 'registry.example.internal/queen-edge' },
  secrets: { ...(values.secrets as object), jwtSecret: 'a-jwt-secret-of-some-length' },
  config: { ...values.config, tenants: { default: { plan: 'free', brokers: ['http://queen:6632'] } } },
} as any;
const templates = readdirSync(join(CHART, 'templates'), { recursive: true, withFileTypes: true })
  .filter((e) => e.isFile())
  .map((e) => {
    const name = join(e.parentPath, e.name).slice(join(CHART, 'templates').length + 1);
    return { name, text: read(join('templates', name)) };
  });
const template = (name: string): string => templates.find((t) => t.name === name)!.text;

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
    const titles = (validate.errors ?? [])
      .map((e) => e.parentSchema?.title)
      .filter(Boolean)
      .join('\n');
    expect(titles).toContain('set config.tenants');
    expect(titles).toContain('set a JWT key source');
    expect(titles).toContain('set image.repository: build the image');
    expect(validate(working), JSON.stringify(validate.errors)).toBe(true);
    // Redis instead of file tenants; a public key instead of a secret.
    expect(
      validate({
        ...values,
        image: working.image,
        redis: { url: 'redis://r:6379' },
        config: { ...values.config, auth: { ...values.config.auth, publicKey: '/k.pem' } },
      }),
    ).toBe(true);
    expect(validate({ ...working, config: { ...working.config, tenants: { t: { plan: 'free', brokers: [] } } } })).toBe(false);
    expect(validate({ ...working, service: { type: 'Ingress', port: 443 } })).toBe(false);
    expect(validate({ ...working, replicaCount: 0 })).toBe(false);
    expect(validate({ ...working, typo: true })).toBe(false);
    expect(
      validate({
        ...working,
        extraVolumes: [{ name: 'keys', secret: { secretName: 'k' } }],
        extraVolumeMounts: [{ name: 'keys', mountPath: '/etc/queen-edge/keys' }],
      }),
    ).toBe(true);
    expect(validate({ ...working, extraVolumeMounts: [{ name: 'keys' }] })).toBe(false);
    expect(validate({ ...working, networkPolicy: { enabled: true, publicFrom: [], adminFrom: [{ namespaceSelector: {} }], egress: [] } })).toBe(true);
  });

  it('the config the chart renders from the least working values becomes Ready', async () => {
    const broker = await startBrokerDouble({ name: 'helm' });
    // As the ConfigMap holds it, with the broker pointed at the double and the ports freed (the only test changes).
    const rendered = structuredClone(working.config);
    rendered.tenants.default.brokers = [broker.url];
    for (const l of ['https', 'http', 'admin'] as const)
      if (rendered.server[l].port !== null) rendered.server[l] = { ...rendered.server[l], host: '127.0.0.1', port: 0 };
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
    expect(templates.map((t) => t.name)).toEqual(
      expect.arrayContaining([
        'deployment.yaml',
        'service.yaml',
        'admin-service.yaml',
        'configmap.yaml',
        'secret.yaml',
        'tls-secret.yaml',
        'hpa.yaml',
        'pdb.yaml',
        'servicemonitor.yaml',
        'networkpolicy.yaml',
        'prometheusrule.yaml',
        'tests/test-readyz.yaml',
      ]),
    );
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
    expect(bare.store.url).toBeNull();
    expect(parseConfig(values.config, { QUEEN_EDGE_STORE_URL: 'postgres://edge:pw@pg:5432/queen' }).store).toMatchObject({
      url: 'postgres://edge:pw@pg:5432/queen',
      schema: 'queen_edge',
    });
    // The store's URL holds a password: the Deployment takes it from the Secret, as the Redis URL.
    const d = templates.find((t) => t.name === 'deployment.yaml')!.text;
    expect(d).toMatch(
      /- name: QUEEN_EDGE_STORE_URL\n\s+valueFrom:\n\s+secretKeyRef: \{ name: \{\{ include "queen-edge.secretName" \. \}\}, key: \{\{ \.Values\.secrets\.keys\.storeUrl \}\}, optional: true \}/,
    );
    expect(templates.find((t) => t.name === 'secret.yaml')!.text).toContain('{{ .Values.secrets.keys.storeUrl }}: {{ .Values.store.url | b64enc | quote }}');
  });

  it('the admin Service reaches pods that are not Ready; an existing Secret is part of the pod checksum', () => {
    expect(templates.find((t) => t.name === 'admin-service.yaml')!.text).toMatch(/^ {2}publishNotReadyAddresses: true$/m);
    const d = templates.find((t) => t.name === 'deployment.yaml')!.text;
    expect(d).toContain('checksum/secret: {{ (lookup "v1" "Secret" .Release.Namespace .Values.secrets.existingSecret).data | toJson | sha256sum }}');
  });

  // biome-ignore lint/suspicious/noTemplateCurlyInString: the config file's ${VAR} substitution is what this test is about
  it('the Deployment passes each ${VAR} the config reads', () => {
    const d = templates.find((t) => t.name === 'deployment.yaml')!.text;
    const vars = new Set([...JSON.stringify(values.config).matchAll(/\$\{([A-Z_]+)/g)].map((m) => m[1]!));
    expect(vars.size).toBeGreaterThan(0);
    for (const v of vars) expect(d, v).toContain(`- name: ${v}`);
  });
});

describe("helm/queen-edge: operators' defaults and options", () => {
  it("names no registry: the image is the operator's to build and push, and rendering without it fails with that message", () => {
    expect((values.image as { repository: string }).repository).toBe('');
    expect(read('values.yaml')).toMatch(/No public registry publishes queen-edge: build the image/);
    expect(read('templates/_helpers.tpl')).toMatch(
      /required "image\.repository is required: build the image from the project's Dockerfile and push it to your registry/,
    );
    for (const name of ['deployment.yaml', 'tests/test-readyz.yaml']) expect(template(name), name).toContain('image: {{ include "queen-edge.image" . }}');
    expect(read('README.md')).toMatch(/docker push/);
  });

  it('the Service is ClusterIP by default; LoadBalancer and NodePort keep client addresses (Local) unless told otherwise', () => {
    expect(values.service).toMatchObject({ type: 'ClusterIP', externalTrafficPolicy: 'Local' });
    expect(template('service.yaml')).toMatch(
      /\{\{- if ne \.Values\.service\.type "ClusterIP" \}\}\n {2}externalTrafficPolicy: \{\{ \.Values\.service\.externalTrafficPolicy \}\}/,
    );
    expect(read('values.yaml')).toMatch(/a per-IP limit becomes a per-node limit/);
  });

  it('one pod by default; more than one pod (or autoscaling) without Redis is refused, and the pods are told how many run', () => {
    const validate = new Ajv({ allErrors: true, strict: false, verbose: true }).compile(JSON.parse(read('values.schema.json')) as object);
    const titles = () => (validate.errors ?? []).map((e) => e.parentSchema?.title).join('\n');
    expect(values.replicaCount).toBe(1);
    expect(validate({ ...working, replicaCount: 2 })).toBe(false);
    expect(titles()).toContain('more than one pod (replicaCount > 1 or autoscaling.enabled) needs Redis');
    expect(validate({ ...working, autoscaling: { ...(values.autoscaling as object), enabled: true } })).toBe(false);
    expect(titles()).toContain('needs Redis');
    expect(validate({ ...working, replicaCount: 2, redis: { url: 'redis://r:6379' } }), JSON.stringify(validate.errors)).toBe(true);
    expect(validate({ ...working, replicaCount: 3, config: { ...working.config, redis: { ...working.config.redis, cluster: ['r1:6379'] } } })).toBe(true);
    expect(
      validate({ ...working, autoscaling: { ...(values.autoscaling as object), enabled: true }, secrets: { ...working.secrets, existingSecret: 'qe' } }),
    ).toBe(true);
    // The pods learn how many may run beside them; a lone pod gets no PodDisruptionBudget (minAvailable: 1 would block every drain).
    expect(template('deployment.yaml')).toMatch(
      /- name: QUEEN_EDGE_REPLICAS\n {14}value: \{\{ ternary \.Values\.autoscaling\.maxReplicas \.Values\.replicaCount \.Values\.autoscaling\.enabled \| quote \}\}/,
    );
    expect(
      template('pdb.yaml').startsWith('{{- if and .Values.podDisruptionBudget.enabled (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) }}'),
    ).toBe(true);
  });

  it('autoscaling is off by default, so replicaCount applies', () => {
    expect(values.autoscaling).toMatchObject({ enabled: false });
    expect(template('hpa.yaml').startsWith('{{- if .Values.autoscaling.enabled }}')).toBe(true);
  });

  it('extra volumes and mounts reach the pod, and the config is a directory mount that an edited ConfigMap updates', () => {
    const d = template('deployment.yaml');
    expect(d).toMatch(/ {6}volumes:[\s\S]*\{\{- with \.Values\.extraVolumes \}\}\n {8}\{\{- toYaml \. \| nindent 8 \}\}/);
    expect(d).toMatch(/ {10}volumeMounts:[\s\S]*\{\{- with \.Values\.extraVolumeMounts \}\}\n {12}\{\{- toYaml \. \| nindent 12 \}\}/);
    expect(d).toContain('args: ["--config", "/etc/queen-edge/config/config.yaml"]');
    expect(d).toMatch(/- name: config\n {14}mountPath: \/etc\/queen-edge\/config\n/);
    expect(d).not.toMatch(/subPath:/);
  });

  it('the NetworkPolicy, when enabled, opens the admin port only to labelled pods and adminFrom; egress is restricted only when listed', () => {
    const np = template('networkpolicy.yaml');
    expect(values.networkPolicy).toMatchObject({ enabled: false });
    expect(np.startsWith('{{- if .Values.networkPolicy.enabled }}')).toBe(true);
    expect(np).toMatch(/- port: admin[\s\S]*from:\n {8}- podSelector:\n {12}matchLabels:\n {14}queen-edge\.io\/admin-access: "true"/);
    expect(np).toMatch(/\{\{- if \.Values\.networkPolicy\.egress \}\}\n {4}- Egress/);
    // The test pod carries the label that lets it through.
    expect(template('tests/test-readyz.yaml')).toContain('queen-edge.io/admin-access: "true"');
  });

  it('helm test: a hook Pod asks the admin Service for /readyz by address (the admin Host guard admits IP literals) and fails unless 200', () => {
    const t = template('tests/test-readyz.yaml');
    expect(t).toContain('"helm.sh/hook": test');
    expect(t).toContain('value: {{ printf "%s-admin" (include "queen-edge.fullname" .) | quote }}');
    expect(t).toContain('value: {{ .Values.adminService.port | quote }}');
    expect(t).toMatch(/fetch\(`http:\/\/\$\{host\}:\$\{port\}\/readyz`/);
    expect(t).toMatch(/if \(res\.status === 200\)[^\n]*process\.exit\(0\)/);
    expect(t).toMatch(/process\.exit\(1\);\n/);
  });

  it("the PrometheusRule embeds the project's rule file (a link to ops/prometheus, which promtool checks)", () => {
    const pr = template('prometheusrule.yaml');
    expect(values.prometheusRule).toMatchObject({ enabled: false });
    expect(pr.startsWith('{{- if .Values.prometheusRule.enabled }}')).toBe(true);
    expect(pr).toContain('{{- .Files.Get "files/queen-edge-rules.yaml" | nindent 2 }}');
    const link = join(CHART, 'files/queen-edge-rules.yaml');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(resolve(CHART, 'files', readlinkSync(link))).toBe(resolve(CHART, '../../ops/prometheus/queen-edge-rules.yaml'));
    expect(read('files/queen-edge-rules.yaml')).toMatch(/^groups:$/m);
  });
});
