/**
 * `npm run demo`: a first look in one command. Starts the in-memory DEVELOPMENT broker
 * (examples/dev-broker.ts, not for production), the edge in front of it with config/default.yaml
 * (a fresh JWT secret and admin token, the broker and the browser page's origin filled in), serves
 * the browser example, mints a token and prints the commands that work right away, and a link
 * that signs in to the operator console, where the demo tenant can be suspended and resumed
 * (kept in memory: there is no Redis here). Ctrl-C stops everything. `npm start` is the real
 * proxy; this is not.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { SignJWT } from 'jose';
import { startApp } from '../src/app.js';
import { loadConfigFile } from '../src/config/load.js';
import { processLogger } from '../src/observability/log.js';
import { startDevBroker } from './dev-broker.js';

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '8443' },
    'admin-port': { type: 'string', default: '9090' },
    'browser-port': { type: 'string', default: '8080' },
  },
});

/** The browser example, as static files on 127.0.0.1. */
async function serveBrowserExample(port: number): Promise<{ origin: string; close(): void }> {
  const files: Record<string, [string, string]> = {
    '/': ['index.html', 'text/html; charset=utf-8'],
    '/index.html': ['index.html', 'text/html; charset=utf-8'],
    '/app.js': ['app.js', 'text/javascript; charset=utf-8'],
  };
  const server = createServer((req, res) => {
    const file = files[new URL(req.url ?? '/', 'http://x').pathname];
    if (!file) return void res.writeHead(404).end();
    readFile(new URL(`./browser/${file[0]}`, import.meta.url)).then(
      (body) => res.writeHead(200, { 'content-type': file[1] }).end(body),
      () => res.writeHead(500).end(),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}

const secret = randomBytes(32).toString('hex');
const adminToken = randomBytes(24).toString('hex');
const broker = await startDevBroker();
const page = await serveBrowserExample(Number(values['browser-port']));
const base = await loadConfigFile(new URL('../config/default.yaml', import.meta.url).pathname, { JWT_SECRET: secret });
const config = {
  ...base,
  server: {
    ...base.server,
    https: { ...base.server.https, port: Number(values.port) },
    admin: { ...base.server.admin, port: Number(values['admin-port']), token: adminToken },
  },
  tenants: { default: { ...base.tenants.default!, brokers: [broker.url], cors: { origins: [page.origin, page.origin.replace('127.0.0.1', 'localhost')] } } },
};
// Warnings and errors only, so the commands below stay readable.
const app = await startApp(config, { log: processLogger({ level: 'warn', format: 'auto' }), memoryOverrides: true });
const edge = `https://localhost:${app.addresses.https!.port}`;
const adminUrl = `http://127.0.0.1:${app.addresses.admin!.port}`;
const token = await new SignJWT({ roles: ['read-write'], tenant: 'default' })
  .setProtectedHeader({ alg: 'HS256' })
  .setSubject('demo')
  .setExpirationTime('12h')
  .sign(new TextEncoder().encode(secret));

const auth = `-H "authorization: Bearer $TOKEN"`;
const json = `-H 'content-type: application/json'`;
// Reads the pop's answer and writes the ack for its first message (node is there: npm ran this).
// An empty pop (the block pasted again: the message is acked already) says so instead of failing.
const ackBody =
  `node -e 'const t = process.argv[1]; let m; try { m = JSON.parse(t).messages[0] } catch {} ` +
  `if (!m) { console.error("nothing to ack: the pop answered " + (t ? t.slice(0, 200) : "no message") + " (a push with a new transactionId is a new message)"); process.exit(1) } ` +
  `console.log(JSON.stringify({ transactionId: m.transactionId, partitionId: m.partitionId, leaseId: m.leaseId, consumerGroup: "demo" }))' "$POP"`;
process.stdout.write(`
queen-edge demo: the edge on ${edge} (self-signed certificate, hence curl -k)
in front of an in-memory DEVELOPMENT broker at ${broker.url} (examples/dev-broker.ts).
NOT FOR PRODUCTION: the broker keeps messages in memory and forgets them on exit. \`npm start\` runs the real proxy.

Paste these into a shell (bash or zsh):
# --- demo commands ---
TOKEN='${token}'
# push a message (run it twice: the second answers "duplicate", same transactionId)
curl -sk ${edge}/api/v1/push ${auth} ${json} -d '{"items":[{"queue":"demo","partition":"p1","transactionId":"hello-1","payload":{"hello":"world"}}]}'; echo
# pop it: a long poll of up to 5 s; the message is leased to the consumer group "demo"
POP=$(curl -sk '${edge}/api/v1/pop/queue/demo?consumerGroup=demo&wait=true&timeout=5000' ${auth}); echo "$POP"
# ack it with the pop's leaseId and partitionId
ACK=$(${ackBody}) && curl -sk ${edge}/api/v1/ack ${auth} ${json} -d "$ACK"; echo
# --- end of demo commands ---

In a browser: open ${edge}/health once and accept the certificate, then
  ${page.origin}/#proxy=${encodeURIComponent(edge)}&token=${token}
(the browser example, examples/browser; docs/browser.md explains it).

Operator console (live traffic, tenants, suspend and resume; docs/console.md), signed in by this link:
  ${adminUrl}/console#token=${adminToken}
The admin API and CLI take the same token:
  QUEEN_EDGE_ADMIN_URL=${adminUrl} QUEEN_EDGE_ADMIN_TOKEN=${adminToken} npx tsx src/cli.ts tenants list
Without Redis, a suspend or resume lasts until the demo stops.

Ctrl-C stops the demo.
`);

const stop = async (): Promise<void> => {
  page.close();
  await app.close(1000);
  await broker.close();
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
