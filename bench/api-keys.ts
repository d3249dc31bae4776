/**
 * `npx tsx bench/api-keys.ts`: the request path's cost of recognising a credential, in process:
 * a cached JWT (the verifier's token cache) against a tenant API key (the key cache's map by id and
 * a SHA-256 of the presented key), with 10 and with 100,000 keys known to the instance. Rounds
 * alternate the cases so machine noise falls on all of them; the median of the rounds is printed.
 */
import { parseArgs } from 'node:util';
import { SignJWT } from 'jose';
import { createTokenVerifier } from '../src/auth/jwt.js';
import { configSchema } from '../src/config/schema.js';
import { mintKey } from '../src/keys/format.js';
import type { ApiKeyRecord } from '../src/keys/store.js';
import { ApiKeyVerifier } from '../src/keys/verifier.js';
import { silentLogger } from '../src/observability/log.js';

const { values } = parseArgs({ options: { calls: { type: 'string', default: '200000' }, rounds: { type: 'string', default: '7' } } });
const CALLS = Number(values.calls);
const ROUNDS = Number(values.rounds);
const SECRET = 'bench-secret-bench-secret-bench-secret-0123';

function keyVerifier(n: number): { verifier: ApiKeyVerifier; key: string } {
  const records: ApiKeyRecord[] = [];
  let key = '';
  for (let i = 0; i < n; i++) {
    const k = mintKey();
    if (i === n >> 1) key = k.key;
    records.push({ id: k.id, tenant: 't', name: '', roles: ['read-write'], createdAt: 0, expiresAt: null, hash: k.hash });
  }
  const store = { onRevoked() {}, touch: async () => {} } as never;
  const verifier = new ApiKeyVerifier(store, { clock: Date.now, log: silentLogger() });
  verifier.setFileKeys(records);
  return { verifier, key };
}

const auth = configSchema.shape.auth.parse({ secret: SECRET });
const jwtVerifier = createTokenVerifier(auth, { log: silentLogger() });
const jwt = await new SignJWT({ roles: ['read-write'], tenant: 't' })
  .setProtectedHeader({ alg: 'HS256' })
  .setSubject('bench')
  .setExpirationTime('1h')
  .sign(new TextEncoder().encode(SECRET));
if ('code' in (await jwtVerifier.verify(jwt))) throw new Error('bench token refused');

const cases: Array<[string, () => unknown]> = [];
cases.push(['cached JWT (HS256)', () => jwtVerifier.cached(jwt)]);
for (const n of [10, 100_000]) {
  const { verifier, key } = keyVerifier(n);
  if (verifier.cached(key) === undefined) throw new Error('bench key refused');
  cases.push([`API key, ${n.toLocaleString('en-US')} keys`, () => verifier.cached(key)]);
}

const samples = new Map<string, number[]>(cases.map(([name]) => [name, []]));
for (let r = 0; r < ROUNDS; r++) {
  for (const [name, fn] of cases) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < CALLS; i++) fn();
    samples.get(name)!.push(Number(process.hrtime.bigint() - t0) / CALLS);
  }
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const base = median(samples.get(cases[0]![0])!);
process.stdout.write(`| credential | ns per lookup (median of ${ROUNDS} rounds × ${CALLS.toLocaleString('en-US')}) | vs cached JWT |\n|---|---:|---:|\n`);
for (const [name] of cases) {
  const m = median(samples.get(name)!);
  process.stdout.write(`| ${name} | ${m.toFixed(0)} | ${(m / base).toFixed(2)}× |\n`);
}
