/**
 * A hint for each configuration problem: what to change, for the mistakes people make most, and
 * otherwise where the setting is documented. Problems are the `path: message` texts of
 * ConfigError; a hint never repeats a value from the file or the environment.
 */

const HINTS: ReadonlyArray<readonly [RegExp, (m: RegExpExecArray) => string]> = [
  [/environment variable (\w+) is (not set|empty)/, (m) => `export ${m[1]}=..., or give it a default in the file: "\${${m[1]}:-value}"`],
  [/Unexpected (flow-map|scalar|flow-map-end).*\$\{|\$\{[^}]*\}.*Unexpected/s, () => 'a ${VAR} inside { ... } must be quoted: port: "${PORT:-8443}"'],
  [/^\S+: .*(at line \d+)/s, () => 'a YAML syntax error: check indentation, and quote values that start with {, [, *, &, ! or contain ": "'],
  [/Unrecognized key/, () => 'remove it or fix its spelling; config/default.yaml lists every key of its section'],
  [/expected number, received string/, () => 'write a number without quotes (a quoted "${VAR}" is read as a number where one is expected)'],
  [/expected boolean/, () => 'true or false, without quotes'],
  [/Invalid option: expected one of/, () => 'use one of the values listed'],
  [/unknown plan "/, () => 'define the plan under plans:, or name one that is there'],
  [/Invalid URL/, () => 'a full URL with its scheme, e.g. http://10.0.0.1:6632'],
  [/more than one worker needs shared state/, () => 'set redis.url (or redis.cluster), or server.workers: 1'],
  [/(host|hosts).*(listed|claimed|already)/i, () => 'each host name belongs to one tenant: remove it from one of them'],
  [
    /^(server\.https|auth\.publicKey|tenants\.[^:]+\.auth\.publicKey|upstreamIdentity\.mint)[^:]*: \S+: (no such file|permission denied)/,
    () => 'the file must be readable where the edge runs; a relative path is resolved from its working directory',
  ],
  [/: not a PEM certificate/, () => 'a PEM file (-----BEGIN CERTIFICATE-----); convert DER with: openssl x509 -inform der -in FILE -out FILE.pem'],
  [
    /: not the PEM private key of/,
    () => 'the key must be the private key of that certificate: openssl x509 -noout -pubkey -in CERT and openssl pkey -pubout -in KEY must print the same',
  ],
  [/publicKey: \S+: /, () => "a PEM public key (-----BEGIN PUBLIC KEY-----) or certificate of the tokens' issuer"],
  [/HMAC secret needs at least/, () => 'generate one: openssl rand -base64 32'],
  [/ENOENT|no such file/, () => 'check the path (--config FILE or $QUEEN_EDGE_CONFIG); config/default.yaml runs on a fresh clone'],
];

/** What to do about one problem. */
export function hintFor(problem: string): string {
  for (const [pattern, hint] of HINTS) {
    const m = pattern.exec(problem);
    if (m) return hint(m);
  }
  const section = /^([A-Za-z]+)/.exec(problem)?.[1];
  return section ? `see the "${section}:" section of config/default.yaml and docs/reference.md` : 'see config/default.yaml and docs/reference.md';
}

/** Problems as printed by `queen-edge validate` and at start: one per line, each followed by its hint. */
export function describeProblems(problems: readonly string[]): string {
  return problems.map((p) => `  ${p.replace(/\n/g, '\n  ')}\n    hint: ${hintFor(p)}\n`).join('');
}
