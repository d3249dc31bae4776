/** The `tracing` section with the OTEL_* environment (pure), and the sampling decision. */
import { describe, expect, it } from 'vitest';
import { withTracingEnv } from '../../src/config/tracing-env.js';
import { sampled, tracingSettings } from '../../src/observability/tracing-settings.js';
import { testConfig } from '../helpers/edge.js';

const FILE = testConfig(['http://127.0.0.1:1']).tracing;

describe('withTracingEnv', () => {
  it('fills what the file leaves unset from the standard variables, the file winning', () => {
    const problems: string[] = [];
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/',
      OTEL_SERVICE_NAME: 'edge-eu',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.01',
    };
    expect(withTracingEnv({ ...FILE, enabled: true }, env, problems)).toMatchObject({
      enabled: true,
      endpoint: 'http://collector:4318/v1/traces',
      serviceName: 'edge-eu',
      parentBased: true,
      ratio: 0.01,
    });
    expect(withTracingEnv({ ...FILE, enabled: true, ratio: 0.5, serviceName: 'mine' }, env, problems)).toMatchObject({ ratio: 0.5, serviceName: 'mine' });
    expect(withTracingEnv(FILE, { ...env, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://other:4318/traces' }, problems).endpoint).toBe(
      'http://other:4318/traces',
    );
    expect(problems).toEqual([]);
  });

  it('refuses a collector address from the environment that is no http(s) URL, naming the variable', () => {
    for (const [name, value] of [
      ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', 'not a url'],
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'collector:4318'],
    ] as const) {
      const problems: string[] = [];
      expect(withTracingEnv({ ...FILE, enabled: true }, { [name]: value }, problems).endpoint).toBeNull();
      expect(problems).toEqual([`${name}: not an http(s) URL`]);
    }
  });

  it('never turns tracing on by itself; OTEL_SDK_DISABLED turns it off', () => {
    expect(withTracingEnv(FILE, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, []).enabled).toBe(false);
    expect(withTracingEnv({ ...FILE, enabled: true }, { OTEL_SDK_DISABLED: 'true' }, []).enabled).toBe(false);
  });

  it('maps every sampler name and reports unknown ones and bad ratios', () => {
    const of = (sampler: string, arg?: string) => withTracingEnv(FILE, { OTEL_TRACES_SAMPLER: sampler, ...(arg ? { OTEL_TRACES_SAMPLER_ARG: arg } : {}) }, []);
    expect(of('always_on')).toMatchObject({ parentBased: false, ratio: 1 });
    expect(of('always_off')).toMatchObject({ parentBased: false, ratio: 0 });
    expect(of('traceidratio', '0.25')).toMatchObject({ parentBased: false, ratio: 0.25 });
    expect(of('parentbased_always_off')).toMatchObject({ parentBased: true, ratio: 0 });
    const problems: string[] = [];
    withTracingEnv(FILE, { OTEL_TRACES_SAMPLER: 'jaeger_remote', OTEL_TRACES_SAMPLER_ARG: '2' }, problems);
    expect(problems).toHaveLength(2);
    expect(problems[0]).toMatch(/^OTEL_TRACES_SAMPLER: /);
    expect(problems[1]).toMatch(/^OTEL_TRACES_SAMPLER_ARG: /);
  });
});

describe('tracingSettings', () => {
  it('is null when off, and has every default when on', () => {
    expect(tracingSettings(FILE)).toBeNull();
    expect(tracingSettings({ ...FILE, enabled: true })).toMatchObject({
      endpoint: 'http://localhost:4318/v1/traces',
      serviceName: 'queen-edge',
      parentBased: true,
      ratio: 1,
      alwaysSampleRefusals: false,
      forwardBaggage: false,
    });
  });
});

describe('sampled', () => {
  it("follows a parent's flag when parent-based, else draws against the ratio", () => {
    expect(sampled(true, true, 0, 0.5)).toBe(true);
    expect(sampled(false, true, 1, 0)).toBe(false);
    expect(sampled(true, false, 0, 0)).toBe(false);
    expect(sampled(null, true, 0.1, 0.05)).toBe(true);
    expect(sampled(null, true, 0.1, 0.1)).toBe(false);
    expect(sampled(null, true, 0, 0)).toBe(false);
  });
});
