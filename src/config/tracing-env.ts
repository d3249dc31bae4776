/**
 * The standard OpenTelemetry environment variables, read where the file is read (a cluster's
 * workers get the result with the rest of the configuration): each fills what `tracing` leaves
 * unset, the file wins. Pure. OTEL_SDK_DISABLED=true turns tracing off whatever the file says.
 */
import type { TracingConfig } from './schema.js';

/** OTEL_TRACES_SAMPLER values and what they mean here: whether a parent decides, and the ratio (null: from OTEL_TRACES_SAMPLER_ARG). */
const SAMPLERS: Readonly<Record<string, { readonly parentBased: boolean; readonly ratio: number | null }>> = {
  always_on: { parentBased: false, ratio: 1 },
  always_off: { parentBased: false, ratio: 0 },
  traceidratio: { parentBased: false, ratio: null },
  parentbased_always_on: { parentBased: true, ratio: 1 },
  parentbased_always_off: { parentBased: true, ratio: 0 },
  parentbased_traceidratio: { parentBased: true, ratio: null },
};

/** The `tracing` section with the environment's values in place of its nulls; problems name the variable. */
export function withTracingEnv(t: TracingConfig, env: NodeJS.ProcessEnv, problems: string[]): TracingConfig {
  const sampler = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase();
  const known = sampler ? SAMPLERS[sampler] : undefined;
  if (sampler && known === undefined) problems.push(`OTEL_TRACES_SAMPLER: "${sampler}" is not one of ${Object.keys(SAMPLERS).join(', ')}`);
  const arg = env.OTEL_TRACES_SAMPLER_ARG?.trim();
  const argRatio = arg ? Number(arg) : null;
  if (argRatio !== null && !(argRatio >= 0 && argRatio <= 1)) problems.push(`OTEL_TRACES_SAMPLER_ARG: "${arg}" is not a ratio between 0 and 1`);
  const envRatio = known === undefined ? null : (known.ratio ?? (argRatio !== null && argRatio >= 0 && argRatio <= 1 ? argRatio : 1));
  return {
    ...t,
    enabled: t.enabled && env.OTEL_SDK_DISABLED?.trim().toLowerCase() !== 'true',
    endpoint: t.endpoint ?? tracesEndpoint(env, problems),
    serviceName: t.serviceName ?? (env.OTEL_SERVICE_NAME?.trim() || null),
    parentBased: t.parentBased ?? known?.parentBased ?? null,
    ratio: t.ratio ?? envRatio,
  };
}

/**
 * The signal's own variable as it is; the general one is a base URL the signal's path is appended
 * to. Checked as the file's `tracing.endpoint` is: an http(s) URL, or a problem naming the variable.
 */
function tracesEndpoint(env: NodeJS.ProcessEnv, problems: string[]): string | null {
  const own = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim();
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim();
  const [name, url] = own
    ? ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', own]
    : base
      ? ['OTEL_EXPORTER_OTLP_ENDPOINT', `${base.replace(/\/+$/, '')}/v1/traces`]
      : [null, null];
  if (name === null || url === null) return null;
  if (!isHttpUrl(url)) {
    problems.push(`${name}: not an http(s) URL`);
    return null;
  }
  return url;
}

function isHttpUrl(text: string): boolean {
  try {
    return /^https?:$/.test(new URL(text).protocol);
  } catch {
    return false;
  }
}
