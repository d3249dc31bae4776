import { mkdtemp, rm } from 'node:fs/promises';
import { freePort } from '../helpers/ports.js';
import http from 'node:http';
import http2 from 'node:http2';
import https from 'node:https';
import net, { type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls, { type TLSSocket } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { configSchema, type RawConfig } from '../../src/config/schema.js';
import { createListeners, listenerTimeouts, type EdgeRequest, type EdgeResponse, type Listeners } from '../../src/listen/servers.js';
import { silentLogger } from '../../src/observability/log.js';
import { fingerprint, makeCa, makeClientCert, makeServerCert, replaceFile, writePem, type Pem, type PemFiles } from '../helpers/certs.js';
import { capturingLogger } from '../helpers/logs.js';
import { waitFor } from '../helpers/wait.js';

type ServerConfig = RawConfig['server'];
interface Overrides {
  https?: Partial<ServerConfig['https']>;
  http?: Partial<ServerConfig['http']>;
  admin?: Partial<ServerConfig['admin']>;
  headersTimeoutMs?: number;
}

/** A `server:` section on 127.0.0.1: HTTPS on an ephemeral port, the rest off unless asked for. */
function serverConfig(over: Overrides = {}): ServerConfig {
  return configSchema.shape.server.parse({
    https: { host: '127.0.0.1', port: 0, ...over.https },
    http: { host: '127.0.0.1', port: null, ...over.http },
    admin: { host: '127.0.0.1', port: null, ...over.admin },
    ...(over.headersTimeoutMs === undefined ? {} : { headersTimeoutMs: over.headersTimeoutMs }),
  });
}

function json(res: EdgeResponse, body: unknown): void {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

/** How many `/slow` requests reached the handler, so a test can start its close once they are in flight. */
let slowArrived = 0;

/** Answers who it is and what it saw; `/slow` answers after 1.2 s, `/hang` never. */
function edge(req: EdgeRequest, res: EdgeResponse): void {
  const socket = req.socket as TLSSocket;
  const peer = typeof socket.getPeerCertificate === 'function' ? socket.getPeerCertificate() : null;
  const body = { listener: 'edge', httpVersion: req.httpVersion, authorized: socket.authorized ?? null, clientCn: peer?.subject?.CN ?? null };
  if (req.url === '/hang') return;
  if (req.url === '/slow') {
    slowArrived++;
    setTimeout(() => json(res, body), 1200);
  } else json(res, body);
}

function admin(_req: EdgeRequest, res: EdgeResponse): void {
  json(res, { listener: 'admin' });
}

const open: Listeners[] = [];
async function start(config: ServerConfig, log = silentLogger()): Promise<{ listeners: Listeners; ports: { https: number; http: number; admin: number } }> {
  const listeners = await createListeners(config, { edge, admin }, { log });
  open.push(listeners);
  const bound = await listeners.listen();
  return { listeners, ports: { https: bound.https?.port ?? -1, http: bound.http?.port ?? -1, admin: bound.admin?.port ?? -1 } };
}

interface Reply {
  status: number;
  body: Record<string, unknown>;
  headers: http.IncomingHttpHeaders;
  reusedSocket: boolean;
  socket: TLSSocket | net.Socket;
}

function h1(options: https.RequestOptions & { tls?: boolean; ALPNProtocols?: string[] }): Promise<Reply> {
  const { tls: secure = true, ...rest } = options;
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).request({ host: '127.0.0.1', path: '/', agent: false, ...rest }, (res) => {
      const socket = res.socket as TLSSocket;
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (data += c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, body: JSON.parse(data) as Record<string, unknown>, headers: res.headers, reusedSocket: req.reusedSocket, socket }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

function h2(session: http2.ClientHttp2Session, path = '/'): Promise<{ status: number; body: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let status = 0;
    let data = '';
    stream.on('response', (headers) => (status = Number(headers[':status'])));
    stream.setEncoding('utf8');
    stream.on('data', (c: string) => (data += c));
    stream.on('end', () => resolve({ status, body: JSON.parse(data) as Record<string, unknown> }));
    stream.on('error', reject);
  });
}

function h2Connect(port: number): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`https://127.0.0.1:${port}`, { rejectUnauthorized: false });
    session.once('connect', () => resolve(session));
    session.once('error', reject);
  });
}

/** The certificate a fresh TLS connection is served. */
function peerCert(
  port: number,
  options: tls.ConnectionOptions = {},
): Promise<tls.DetailedPeerCertificate & { alpn: string | false | null; authorized: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...options }, () => {
      resolve({ ...socket.getPeerCertificate(true), alpn: socket.alpnProtocol, authorized: socket.authorized });
      socket.destroy();
    });
    socket.on('error', reject);
  });
}

/** Opens a raw connection (TLS with ALPN http/1.1 when `secure`), writes `data`, and collects until the server closes. */
function raw(port: number, data: string | Buffer, secure = false): Promise<{ text: string; closedAfterMs: number }> {
  return new Promise((resolve, reject) => {
    const t0 = Date.now();
    let text = '';
    const socket: net.Socket = secure
      ? tls.connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }, () => socket.write(data))
      : net.connect({ host: '127.0.0.1', port }, () => socket.write(data));
    socket.setEncoding('utf8');
    socket.on('data', (c: string) => (text += c));
    socket.on('error', () => undefined); // a reset after the answer is fine; the text tells the outcome
    socket.on('close', () => resolve({ text, closedAfterMs: Date.now() - t0 }));
    setTimeout(() => {
      socket.destroy();
      reject(new Error(`server kept the connection open; got ${JSON.stringify(text)}`));
    }, 5000).unref();
  });
}

async function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen({ host: '127.0.0.1', port }, () => s.close(() => resolve(true)));
  });
}

let ca: Pem;
let dir: string;
beforeAll(async () => {
  ca = await makeCa();
  dir = await mkdtemp(join(tmpdir(), 'qe-listen-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});
afterEach(async () => {
  await Promise.all(open.splice(0).map((l) => l.close(0)));
});

describe('listenerTimeouts', () => {
  it('never goes below what a parked long poll needs', () => {
    const t = listenerTimeouts(serverConfig({ headersTimeoutMs: 500 }));
    // Defaults: maxTimeoutMs 60000 + slackMs 5000; keepAliveTimeoutMs 65000.
    expect(t).toEqual({ headersTimeoutMs: 500, requestTimeoutMs: 300_000, keepAliveTimeoutMs: 65_000, idleTimeoutMs: 70_000, checkIntervalMs: 250 });
    const long = configSchema.shape.server.parse({ longPoll: { maxTimeoutMs: 600_000, slackMs: 5000 }, headersTimeoutMs: 400_000 });
    expect(listenerTimeouts(long)).toMatchObject({ requestTimeoutMs: 605_000, idleTimeoutMs: 610_000, checkIntervalMs: 1000 });
  });
});

describe('HTTPS certificates', () => {
  it('serves a generated self-signed certificate for localhost when none is configured', async () => {
    const { log, lines } = capturingLogger();
    const { ports } = await start(serverConfig(), log);
    const cert = await peerCert(ports.https, { servername: 'localhost' });
    expect(cert.subjectaltname).toContain('DNS:localhost');
    expect(cert.subjectaltname).toContain('IP Address:127.0.0.1');
    const reply = await h1({ port: ports.https, rejectUnauthorized: false });
    expect(reply.body).toMatchObject({ listener: 'edge', httpVersion: '1.1' });
    expect(lines.some((l) => l.level === 40 && l.msg.includes('self-signed'))).toBe(true);
  });

  it('serves the configured certificate, which verifies against the test CA', async () => {
    const files = await writePem(dir, 'configured', await makeServerCert(ca, ['localhost', '127.0.0.1']));
    const { ports } = await start(serverConfig({ https: files }));
    const reply = await h1({ port: ports.https, ca: ca.cert });
    expect(reply.status).toBe(200);
    expect((reply.socket as TLSSocket).authorized).toBe(true);
    await expect(h1({ port: ports.https })).rejects.toThrow(/certificate/); // not trusted without the CA
  });

  it('chooses the certificate by SNI: exact and wildcard names, the default for others', async () => {
    const def = await writePem(dir, 'sni-default', await makeServerCert(ca, ['default.test']));
    const a = await writePem(dir, 'sni-a', await makeServerCert(ca, ['a.test']));
    const b = await writePem(dir, 'sni-b', await makeServerCert(ca, ['*.b.test']));
    const { ports } = await start(
      serverConfig({
        https: {
          ...def,
          sni: [
            { servername: 'a.test', ...a },
            { servername: '*.b.test', ...b },
          ],
        },
      }),
    );
    const seen = async (servername: string): Promise<string | undefined> => {
      const c = await peerCert(ports.https, { servername, ca: ca.cert, rejectUnauthorized: true });
      return c.subjectaltname;
    };
    expect(await seen('a.test')).toBe('DNS:a.test');
    expect(await seen('x.b.test')).toBe('DNS:*.b.test');
    expect(await seen('unknown.test').catch((e: Error) => e.message)).toMatch(/altnames|does not match/i); // default cert served
    expect((await peerCert(ports.https, { servername: 'unknown.test' })).subjectaltname).toBe('DNS:default.test');
    // The h1 and h2 paths both go through SNI.
    const reply = await h1({ port: ports.https, servername: 'a.test', ca: ca.cert, headers: { host: 'a.test' } });
    expect(reply.status).toBe(200);
  });

  it('reloads replaced certificate files for new connections; open connections keep working; a broken pair keeps the old one', async () => {
    const v1 = await makeServerCert(ca, ['localhost']);
    const v2 = await makeServerCert(ca, ['localhost']);
    const files: PemFiles = await writePem(dir, 'reload', v1);
    const { log, lines } = capturingLogger();
    const { ports } = await start(serverConfig({ https: files }), log);
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, rejectUnauthorized: false });
    const session = await h2Connect(ports.https);
    try {
      const first = await h1({ port: ports.https, agent });
      expect(fingerprint(pemOf(first.socket as TLSSocket))).toBe(fingerprint(v1.cert));
      expect((await h2(session)).status).toBe(200);

      await replaceFile(files.key, v2.key);
      await replaceFile(files.cert, v2.cert);
      await waitFor(async () => (await peerCert(ports.https)).fingerprint256 === fingerprint(v2.cert), 5000, 'the new certificate served');

      const again = await h1({ port: ports.https, agent });
      expect(again.reusedSocket).toBe(true);
      expect(again.status).toBe(200);
      expect(fingerprint(pemOf(again.socket as TLSSocket))).toBe(fingerprint(v1.cert));
      expect((await h2(session)).status).toBe(200);

      await replaceFile(files.cert, 'not a certificate');
      await waitFor(() => lines.some((l) => l.level === 50 && l.msg.startsWith('server.https:')), 5000, 'the error log line rejecting the bad certificate');
      expect((await peerCert(ports.https)).fingerprint256).toBe(fingerprint(v2.cert));
    } finally {
      agent.destroy();
      session.destroy();
    }
  });
});

function pemOf(socket: TLSSocket): string {
  const der = socket.getPeerCertificate().raw;
  return `-----BEGIN CERTIFICATE-----\n${der.toString('base64')}\n-----END CERTIFICATE-----\n`;
}

describe('client certificates', () => {
  let ports: { https: number };
  let client: Pem;
  let stranger: Pem;
  beforeAll(async () => {
    const clientCa = await makeCa('client CA');
    await replaceFile(join(dir, 'client-ca.pem'), clientCa.cert);
    client = await makeClientCert(clientCa, 'device-1');
    stranger = await makeClientCert(await makeCa('someone else'), 'device-2');
    const files = await writePem(dir, 'mtls', await makeServerCert(ca, ['localhost']));
    const listeners = await createListeners(
      serverConfig({ https: { ...files, clientCa: join(dir, 'client-ca.pem') } }),
      { edge, admin },
      { log: silentLogger() },
    );
    const bound = await listeners.listen();
    ports = { https: bound.https!.port };
    return () => listeners.close(0);
  });

  it('refuses a client without a certificate or with one from another CA', async () => {
    await expect(h1({ port: ports.https, rejectUnauthorized: false })).rejects.toThrow();
    await expect(h1({ port: ports.https, rejectUnauthorized: false, ...stranger })).rejects.toThrow();
  });

  it('serves a client whose certificate the CA signed, over h1 and h2', async () => {
    const reply = await h1({ port: ports.https, rejectUnauthorized: false, ...client });
    expect(reply.body).toMatchObject({ authorized: true, clientCn: 'device-1' });
    const session = http2.connect(`https://127.0.0.1:${ports.https}`, { rejectUnauthorized: false, ...client });
    try {
      expect((await h2(session)).body).toMatchObject({ httpVersion: '2.0', authorized: true, clientCn: 'device-1' });
    } finally {
      session.close();
    }
  });
});

describe('protocols and guards', () => {
  let ports: { https: number; http: number; admin: number };
  let listeners: Listeners;
  beforeAll(async () => {
    ({ listeners, ports } = await start(serverConfig({ http: { port: 0 }, admin: { port: 0 }, headersTimeoutMs: 500 })));
    open.splice(open.indexOf(listeners), 1); // shared by this block, closed in its own test
  });

  it('negotiates h2 by ALPN for an HTTP/2 client and http/1.1 for an HTTPS client', async () => {
    const session = await h2Connect(ports.https);
    try {
      expect(session.alpnProtocol).toBe('h2');
      expect(await h2(session)).toEqual({ status: 200, body: expect.objectContaining({ listener: 'edge', httpVersion: '2.0' }) });
    } finally {
      session.close();
    }
    expect((await peerCert(ports.https, { ALPNProtocols: ['h2', 'http/1.1'] })).alpn).toBe('h2');
    const reply = await h1({ port: ports.https, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
    expect(reply.body).toMatchObject({ httpVersion: '1.1' });
    expect((reply.socket as TLSSocket).alpnProtocol).toBe('http/1.1');
    // A client that offers no ALPN at all gets h1 too.
    expect((await h1({ port: ports.https, rejectUnauthorized: false })).body).toMatchObject({ httpVersion: '1.1' });
  });

  it('drops a connection that stalls inside its request head after ~headersTimeoutMs, while other requests and long answers go on', async () => {
    const partial = 'GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ';
    const stalls = [raw(ports.http, partial), raw(ports.https, partial, true)];
    const session = await h2Connect(ports.https);
    try {
      // Meanwhile: a normal request, and answers that take longer than the headers timeout (a parked poll).
      const [normal, slowH1, slowH2] = await Promise.all([
        h1({ port: ports.http, tls: false }),
        h1({ port: ports.https, path: '/slow', rejectUnauthorized: false }),
        h2(session, '/slow'),
      ]);
      expect([normal.status, slowH1.status, slowH2.status]).toEqual([200, 200, 200]);
    } finally {
      session.close();
    }
    for (const stalled of await Promise.all(stalls)) {
      expect(stalled.text).toMatch(/^HTTP\/1\.1 408/);
      expect(stalled.closedAfterMs).toBeGreaterThanOrEqual(450);
      expect(stalled.closedAfterMs).toBeLessThan(2000);
    }
  });

  it('answers an over-size request head with 431 on plain HTTP and on TLS', async () => {
    const huge = `GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: ${'a'.repeat(20 * 1024)}\r\n\r\n`;
    expect((await raw(ports.http, huge)).text).toMatch(/^HTTP\/1\.1 431 /);
    expect((await raw(ports.https, huge, true)).text).toMatch(/^HTTP\/1\.1 431 /);
    const fits = `GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Big: ${'a'.repeat(12 * 1024)}\r\n\r\n`;
    expect((await raw(ports.http, fits)).text).toMatch(/^HTTP\/1\.1 200 /);
  });

  it('resets an h2 stream whose header list is over the limit, and the session goes on', async () => {
    const session = await h2Connect(ports.https);
    try {
      // The limit holds once the client has acknowledged the server's SETTINGS (RFC 9113 §6.5.3); a first
      // request round trip makes sure of that.
      expect((await h2(session)).status).toBe(200);
      const refused = await new Promise<string>((resolve) => {
        const stream = session.request({ ':path': '/', 'x-big': 'a'.repeat(20 * 1024) });
        stream.on('response', () => resolve('answered'));
        stream.on('error', (e: Error) => resolve(e.message));
      });
      expect(refused).toMatch(/ENHANCE_YOUR_CALM/);
      expect((await h2(session)).status).toBe(200);
    } finally {
      session.close();
    }
  });

  it('answers garbage with a 400 JSON body and keeps serving; garbage instead of a TLS handshake just closes', async () => {
    const reply = await raw(ports.http, Buffer.from([0x16, 0x03, 0x01, 0x00, 0xff, 0x0d, 0x0a, 0x00, 0x0d, 0x0a]));
    expect(reply.text).toMatch(/^HTTP\/1\.1 400 /);
    expect(reply.text.endsWith('{"error":"bad request","code":"invalid_request"}')).toBe(true);
    expect((await raw(ports.https, 'this is not TLS\r\n\r\n')).text).toBe('');
    expect((await raw(ports.https, 'BLAH BLAH\r\n\r\n', true)).text).toMatch(/^HTTP\/1\.1 400 /);
    expect((await h1({ port: ports.http, tls: false })).status).toBe(200);
    expect((await h1({ port: ports.https, rejectUnauthorized: false })).status).toBe(200);
  });

  it('answers a plain-HTTP request on the TLS port with a 400 JSON body, as nginx does, and keeps serving TLS', async () => {
    const reply = await raw(ports.https, 'GET /api/v1/resources/queues HTTP/1.1\r\nHost: localhost\r\n\r\n');
    expect(reply.text).toMatch(/^HTTP\/1\.1 400 /);
    expect(reply.text).toContain('Connection: close');
    const body = JSON.parse(reply.text.slice(reply.text.indexOf('\r\n\r\n') + 4)) as Record<string, unknown>;
    expect(body).toEqual({ error: expect.stringContaining('plain HTTP request sent to the HTTPS port'), code: 'invalid_request' });
    expect((await h1({ port: ports.https, rejectUnauthorized: false })).status).toBe(200);
  });

  it('serves the admin handler on the admin port only', async () => {
    expect((await h1({ port: ports.admin, tls: false })).body).toEqual({ listener: 'admin' });
    expect((await h1({ port: ports.http, tls: false })).body).toMatchObject({ listener: 'edge' });
  });

  it('close() lets an in-flight request finish, closes idle connections, and frees the ports', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const session = await h2Connect(ports.https);
    const adminAgent = new http.Agent({ keepAlive: true });
    try {
      await h1({ port: ports.http, tls: false, agent }); // now idle, kept alive
      await h1({ port: ports.admin, tls: false, agent: adminAgent });
      await h2(session);
      // The h1 and h2 connections; the admin one is not a client connection. (Earlier tests' sockets may still be closing.)
      await waitFor(() => listeners.connections() === 2, 5000, 'two client connections open');
      const slowBefore = slowArrived;
      const inFlight = h1({ port: ports.http, tls: false, path: '/slow' });
      const inFlightH2 = h2(session, '/slow');
      await waitFor(() => slowArrived === slowBefore + 2, 5000, 'both /slow requests in the handler');
      const t0 = Date.now();
      await listeners.close(5000);
      expect(Date.now() - t0).toBeLessThan(2500);
      const [r1, r2] = await Promise.all([inFlight, inFlightH2]);
      expect(r1.status).toBe(200);
      expect(r1.headers.connection).toBe('close');
      expect(r2.status).toBe(200);
      expect(listeners.connections()).toBe(0);
      for (const port of Object.values(ports)) expect(await portIsFree(port)).toBe(true);
    } finally {
      agent.destroy();
      adminAgent.destroy();
      session.destroy();
    }
  });
});

describe('lifecycle', () => {
  it('close(forceAfterMs) destroys connections still busy after the grace time', async () => {
    const { listeners, ports } = await start(serverConfig({ http: { port: 0 } }));
    const outcome = (p: Promise<Reply>): Promise<string> =>
      p.then(
        () => 'answered',
        (e: Error) => e.message,
      );
    const hung = outcome(h1({ port: ports.http, tls: false, path: '/hang' }));
    const hungTls = outcome(h1({ port: ports.https, path: '/hang', rejectUnauthorized: false }));
    await waitFor(() => listeners.connections() === 2, 5000, 'two client connections open');
    const t0 = Date.now();
    await listeners.close(300);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    expect(Date.now() - t0).toBeLessThan(1500);
    expect(await hung).toMatch(/socket hang up|ECONNRESET/);
    expect(await hungTls).toMatch(/socket hang up|ECONNRESET/);
  });

  it('rejects listen() with a clear message when a port is taken, and leaves nothing bound', async () => {
    const blocker = net.createServer();
    await new Promise<void>((r) => blocker.listen({ host: '127.0.0.1', port: 0 }, r));
    const taken = (blocker.address() as AddressInfo).port;
    const adminPort = await freePort();
    try {
      const listeners = await createListeners(serverConfig({ http: { port: taken }, admin: { port: adminPort } }), { edge, admin }, { log: silentLogger() });
      open.push(listeners);
      await expect(listeners.listen()).rejects.toThrow(`http listener cannot listen on 127.0.0.1:${taken}: address already in use (EADDRINUSE)`);
      expect(await portIsFree(adminPort)).toBe(true);
    } finally {
      await new Promise((r) => blocker.close(r));
    }
  });

  it('serves h1 only when http2 is off', async () => {
    const { ports } = await start(serverConfig({ https: { http2: false } }));
    expect((await peerCert(ports.https, { ALPNProtocols: ['h2', 'http/1.1'] })).alpn).toBe('http/1.1');
    expect((await h1({ port: ports.https, rejectUnauthorized: false })).body).toMatchObject({ httpVersion: '1.1' });
    // The h1-only server meets plain HTTP on its TLS port the same way.
    expect((await raw(ports.https, 'POST /api/v1/push HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{}')).text).toMatch(
      /^HTTP\/1\.1 400 [\s\S]*plain HTTP request sent to the HTTPS port/,
    );
  });
});
