/**
 * Slowloris and connection floods: many half-open connections do not starve real
 * clients, and the edge sheds them after the headers timeout.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { connect as netConnect, type Socket } from 'node:net';
import { startBrokerDouble, type BrokerDouble } from '../helpers/broker-double.js';
import { call, startEdge, testConfig, type EdgeHarness } from '../helpers/edge.js';

let broker: BrokerDouble;
let edge: EdgeHarness;

beforeAll(async () => {
  broker = await startBrokerDouble();
  edge = await startEdge(testConfig([broker.url], { server: { headersTimeoutMs: 1000 } }));
});
afterAll(async () => {
  await edge.close();
  await broker.close();
});

function closed(s: Socket | TLSSocket): Promise<void> {
  return new Promise((resolve) => (s.destroyed ? resolve() : s.once('close', () => resolve())));
}

describe('slowloris', () => {
  it('300 connections trickling headers do not block real requests, and are cut after the headers timeout', async () => {
    const port = Number(new URL(edge.url).port);
    const plainPort = Number(new URL(edge.httpUrl).port);
    const slow: (Socket | TLSSocket)[] = [];
    for (let i = 0; i < 150; i++) {
      const s = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] }, () =>
        s.write('GET /health HTTP/1.1\r\nHost: acme.localhost\r\nX-Slow: '),
      );
      s.on('error', () => {});
      slow.push(s);
      const p = netConnect({ host: '127.0.0.1', port: plainPort }, () => p.write('POST /api/v1/push HTTP/1.1\r\nHost: acme.localhost\r\n'));
      p.on('error', () => {});
      slow.push(p);
    }
    const started = Date.now();
    // Keep trickling a byte now and then: the deadline is for the whole head, not per byte.
    const trickle = setInterval(() => {
      for (const s of slow) if (!s.destroyed) s.write('a');
    }, 200);
    try {
      for (let i = 0; i < 10; i++) {
        const r = await call(edge, 'GET', '/health');
        expect(r.status).toBe(200);
      }
      await Promise.all(slow.map(closed));
      const elapsed = Date.now() - started;
      expect(elapsed).toBeGreaterThanOrEqual(900);
      // Cut by the 1-s headers timeout, not by a later one (keep-alive 65 s, request 300 s); the
      // margin is for a loaded machine, where the edge's periodic timeout check runs late.
      expect(elapsed).toBeLessThan(30000);
      expect((await call(edge, 'GET', '/health')).status).toBe(200);
    } finally {
      clearInterval(trickle);
      for (const s of slow) s.destroy();
    }
  }, 90000);

  it('a flood of idle TLS connections that never send a byte does not block real requests', async () => {
    const port = Number(new URL(edge.url).port);
    const idle: TLSSocket[] = [];
    for (let i = 0; i < 100; i++) {
      const s = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false });
      s.on('error', () => {});
      idle.push(s);
    }
    try {
      await Promise.all(idle.map((s) => new Promise((r) => (s.readyState === 'open' ? r(null) : s.once('secureConnect', r)))));
      for (let i = 0; i < 10; i++) expect((await call(edge, 'GET', '/health')).status).toBe(200);
    } finally {
      for (const s of idle) s.destroy();
    }
  });
});
