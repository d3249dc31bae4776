/**
 * Scenario 6: N parked `wait=true` pops through the edge, held at the double for a fixed time
 * while the edge's RSS, event-loop delay and the latency of a probe push are measured. Over h1
 * each poll has its own raw TLS keep-alive connection (as SDK consumers hold them); over h2 (6b)
 * polls are streams, H2_POLLS_PER_SESSION to a TLS connection, as a browser's share one.
 */
import { request as httpRequest } from 'node:http';
import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { Agent, request as httpsRequest } from 'node:https';
import { connect, type TLSSocket } from 'node:tls';
import type { EdgeProcess } from './edge.js';
import { sleep, treeCpuSeconds, treeRssBytes } from './procs.js';

/** What one long-poll run measured. */
export interface LongPollResult {
  /** How the polls reached the edge. */
  proto: 'h1' | 'h2';
  polls: number;
  /** Parked at the double at the peak (should equal polls). */
  parkedAtPeak: number;
  secondsToPark: number;
  holdSeconds: number;
  rssBeforeMiB: number;
  rssPeakMiB: number;
  rssPerPollKiB: number;
  /** V8 heap used per parked poll (garbage not yet collected included): the JS share of the RSS. */
  heapPerPollKiB: number;
  loopDelayP50Ms: number;
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
  /** Latency of a push sent through the edge every 100 ms while the polls were parked. */
  probeP50Ms: number;
  probeP99Ms: number;
  probeErrors: number;
  /** Proxy CPU seconds while everything was parked (idle connections should cost ~0). */
  cpuSecondsDuringHold: number;
  /** Polls answered 204 after the release. */
  answered204: number;
  /** Polls answered otherwise, cut, or whose connection failed. */
  failed: number;
  /** Connections that failed (reset or refused) before or while parked. */
  connectionFailures: number;
}

/** Long enough that the first polls are still parked when the last of 10,000 handshakes is done (the edge's cap is raised to match). */
export const PARK_TIMEOUT_MS = 240_000;

/** Streams per h2 connection in 6b: under the edge's 256 concurrent streams per session. */
export const H2_POLLS_PER_SESSION = 250;

interface Poll {
  /** 0 until the answer's status arrives; -1 when the connection or stream failed. */
  status: number;
}

/** The polls of a run and how to drop their connections. */
interface OpenPolls {
  readonly polls: Poll[];
  close(): void;
}

/** Opens `n` TLS connections to the edge, at most `concurrency` handshakes at a time, and sends one parked pop on each. */
async function openPolls(port: number, n: number, token: string, concurrency: number): Promise<OpenPolls> {
  const sockets: TLSSocket[] = [];
  const head = Buffer.from(
    `GET /api/v1/pop/queue/bench?wait=true&timeout=${PARK_TIMEOUT_MS} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n\r\n`,
  );
  const polls: Poll[] = [];
  let next = 0;
  const worker = async () => {
    while (next < n) {
      next++;
      const poll = await new Promise<Poll>((resolve) => {
        const socket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] });
        sockets.push(socket);
        const p: Poll = { status: 0 };
        socket.once('secureConnect', () => {
          socket.write(head);
          resolve(p);
        });
        // A reset (before or after the handshake) is a failed poll, counted, never a crash.
        socket.on('error', () => {
          if (p.status === 0) p.status = -1;
          resolve(p);
        });
        socket.on('data', (chunk: Buffer) => {
          if (p.status <= 0) p.status = Number(chunk.toString('latin1', 9, 12));
        });
      });
      polls.push(poll);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return {
    polls,
    close: () => {
      for (const s of sockets) s.destroy();
    },
  };
}

/** Opens `n` parked pops as h2 streams, H2_POLLS_PER_SESSION to a connection. */
async function openH2Polls(base: string, n: number, token: string): Promise<OpenPolls> {
  const sessions: ClientHttp2Session[] = [];
  const polls: Poll[] = [];
  for (let first = 0; first < n; first += H2_POLLS_PER_SESSION) {
    const session = h2connect(base, { rejectUnauthorized: false });
    sessions.push(session);
    session.on('error', () => {});
    const up = await new Promise<boolean>((resolve) => {
      session.once('remoteSettings', () => resolve(true));
      session.once('close', () => resolve(false));
    });
    for (let i = first; i < Math.min(n, first + H2_POLLS_PER_SESSION); i++) {
      const p: Poll = { status: up ? 0 : -1 };
      polls.push(p);
      if (!up) continue;
      const stream = session.request(
        { ':method': 'GET', ':path': `/api/v1/pop/queue/bench?wait=true&timeout=${PARK_TIMEOUT_MS}`, authorization: `Bearer ${token}` },
        { endStream: true },
      );
      stream.on('response', (headers) => {
        p.status = Number(headers[':status']);
      });
      stream.on('error', () => {
        if (p.status === 0) p.status = -1;
      });
      stream.resume();
    }
  }
  return {
    polls,
    close: () => {
      for (const s of sessions) s.destroy();
    },
  };
}

function doubleCall(port: number, method: string, path: string): Promise<Record<string, number>> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, method, path }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve(JSON.parse(text) as Record<string, number>));
    });
    req.on('error', reject);
    req.end();
  });
}

/** One push through the edge on a keep-alive agent; resolves its latency in ms (NaN on failure). */
function probePush(edge: EdgeProcess, agent: Agent, token: string): Promise<number> {
  const body = '{"items":[{"queue":"probe","payload":{"n":1}}]}';
  const started = process.hrtime.bigint();
  return new Promise((resolve) => {
    const req = httpsRequest(
      `${edge.base}/api/v1/push`,
      {
        method: 'POST',
        agent,
        rejectUnauthorized: false,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode === 201 ? Number(process.hrtime.bigint() - started) / 1e6 : Number.NaN));
      },
    );
    req.on('error', () => resolve(Number.NaN));
    req.end(body);
  });
}

function percentile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

/** Parks `n` polls, holds them `holdSeconds`, releases them, and reports. */
export async function runLongPolls(
  edge: EdgeProcess,
  doublePort: number,
  n: number,
  holdSeconds: number,
  token: string,
  proto: 'h1' | 'h2' = 'h1',
): Promise<LongPollResult> {
  const port = Number(new URL(edge.base).port);
  const rssBefore = treeRssBytes(edge.pid);
  const heapBefore = (await edge.read()).heapUsedBytes;
  const t0 = Date.now();
  const open = proto === 'h2' ? await openH2Polls(edge.base, n, token) : await openPolls(port, n, token, 64);
  const polls = open.polls;
  let parked = 0;
  const parkDeadline = Date.now() + 120_000;
  // Polls refused or cut by the edge never park: wait for the ones still waiting for an answer.
  const waiting = () => polls.filter((p) => p.status === 0).length;
  for (;;) {
    parked = (await doubleCall(doublePort, 'GET', '/__bench/stats')).parked ?? 0;
    if (parked >= waiting() || Date.now() >= parkDeadline) break;
    await sleep(200);
  }
  const secondsToPark = (Date.now() - t0) / 1000;

  edge.resetLoopDelay();
  const cpu0 = treeCpuSeconds(edge.pid);
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const probes: number[] = [];
  let rssPeak = treeRssBytes(edge.pid);
  const holdEnd = Date.now() + holdSeconds * 1000;
  let lastRss = 0;
  while (Date.now() < holdEnd) {
    probes.push(await probePush(edge, agent, token));
    if (Date.now() - lastRss >= 1000) {
      rssPeak = Math.max(rssPeak, treeRssBytes(edge.pid));
      lastRss = Date.now();
    }
    await sleep(100);
  }
  const cpuHold = treeCpuSeconds(edge.pid) - cpu0;
  const reading = await edge.read();
  agent.destroy();
  const parkedAtPeak = (await doubleCall(doublePort, 'GET', '/__bench/stats')).parked ?? 0;

  await doubleCall(doublePort, 'POST', '/__bench/release');
  const answerDeadline = Date.now() + 60_000;
  while (polls.some((p) => p.status === 0) && Date.now() < answerDeadline) await sleep(100);
  const answered204 = polls.filter((p) => p.status === 204).length;
  open.close();

  const ok = probes.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  const mib = (b: number) => b / 1048576;
  return {
    proto,
    polls: n,
    parkedAtPeak: Math.max(parked, parkedAtPeak),
    secondsToPark,
    holdSeconds,
    rssBeforeMiB: mib(rssBefore),
    rssPeakMiB: mib(rssPeak),
    rssPerPollKiB: (rssPeak - rssBefore) / 1024 / n,
    heapPerPollKiB: (reading.heapUsedBytes - heapBefore) / 1024 / n,
    loopDelayP50Ms: reading.loopP50Ms,
    loopDelayP99Ms: reading.loopP99Ms,
    loopDelayMaxMs: reading.loopMaxMs,
    probeP50Ms: percentile(ok, 0.5),
    probeP99Ms: percentile(ok, 0.99),
    probeErrors: probes.length - ok.length,
    cpuSecondsDuringHold: cpuHold,
    answered204,
    failed: n - answered204,
    connectionFailures: polls.filter((p) => p.status === -1).length,
  };
}
