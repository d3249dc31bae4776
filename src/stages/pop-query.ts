/**
 * Pop query parameters (the broker's pop contract; long polls in docs/architecture.md), pure: validated once, the long-poll
 * `timeout` capped at the maximum, and the query rewritten only when the proxy changed it.
 */
import { edgeError, type EdgeError } from '../errors.js';

export interface LongPollSettings {
  readonly defaultTimeoutMs: number;
  readonly maxTimeoutMs: number;
  readonly slackMs: number;
}

export interface PopQuery {
  readonly params: URLSearchParams;
  /** `wait=true`: parks at the broker. */
  readonly wait: boolean;
  /** Effective long-poll timeout (ms) when `wait`. */
  readonly timeoutMs: number;
  /** Query to forward (without `?`). */
  readonly forwardQuery: string;
}

/** Parameters whose repetition would let the proxy and the broker read different values. */
const SINGLE = ['wait', 'timeout', 'batch', 'partitions', 'consumerGroup', 'namespace', 'task', 'autoAck', 'leaseSeconds'];
const UINT = /^\d{1,10}$/;

export function parsePopQuery(raw: string, maxBatch: number, lp: LongPollSettings): PopQuery | EdgeError {
  const params = new URLSearchParams(raw);
  for (const name of SINGLE) {
    if (params.getAll(name).length > 1) return edgeError('invalid_request', `query parameter "${name}" given more than once`);
  }
  const batch = params.get('batch');
  if (batch !== null) {
    if (!UINT.test(batch) || Number(batch) < 1) return edgeError('invalid_request', '"batch" must be a positive integer');
    if (Number(batch) > maxBatch) return edgeError('invalid_request', `"batch" exceeds the plan's maximum of ${maxBatch}`);
  }
  const partitions = params.get('partitions');
  if (partitions !== null && (!UINT.test(partitions) || Number(partitions) < 1)) {
    return edgeError('invalid_request', '"partitions" must be a positive integer');
  }
  const waitRaw = params.get('wait');
  if (waitRaw !== null && waitRaw !== 'true' && waitRaw !== 'false') return edgeError('invalid_request', '"wait" must be true or false');
  const timeoutRaw = params.get('timeout');
  if (timeoutRaw !== null && !UINT.test(timeoutRaw)) return edgeError('invalid_request', '"timeout" must be a non-negative integer (ms)');
  const wait = waitRaw === 'true';
  if (!wait) return { params, wait, timeoutMs: 0, forwardQuery: raw };
  const asked = timeoutRaw === null ? lp.defaultTimeoutMs : Number(timeoutRaw);
  const timeoutMs = Math.min(asked, lp.maxTimeoutMs);
  // An absent timeout is made explicit: the broker's own default may exceed the edge's maximum.
  params.set('timeout', String(timeoutMs));
  return { params, wait, timeoutMs, forwardQuery: withTimeout(raw, timeoutMs) };
}

/**
 * The raw query with its `timeout` pair, however the name was spelled (`t%69meout`), written
 * plainly as `timeout=<ms>` (appended when absent), every other pair kept byte for byte.
 * Re-serialising the whole query would change what the broker reads: URLSearchParams writes a
 * space as `+`, which a broker that decodes only `%XX` reads as a literal `+` (another consumer
 * group); a name the broker does not decode would leave it on its own default timeout.
 */
function withTimeout(raw: string, ms: number): string {
  const pairs = raw === '' ? [] : raw.split('&');
  let found = false;
  for (let i = 0; i < pairs.length; i++) {
    const pair = pairs[i]!;
    const eq = pair.indexOf('=');
    const name = eq === -1 ? pair : pair.slice(0, eq);
    if (name === 'timeout' || (name.includes('%') && new URLSearchParams(pair).has('timeout'))) {
      pairs[i] = `timeout=${ms}`;
      found = true;
    }
  }
  if (!found) pairs.push(`timeout=${ms}`);
  return pairs.join('&');
}
