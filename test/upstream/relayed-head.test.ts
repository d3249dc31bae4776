/**
 * The broker's response head as the client gets it, over HTTP/1.1 and HTTP/2: repeated fields
 * kept, hop-by-hop and edge-owned fields dropped, the edge's own headers (request id, CORS's
 * Access-Control-*, Vary and Timing-Allow-Origin) in place of the broker's.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, h2Session, startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

let broker: http.Server;
let edge: EdgeHarness;
let rw: string;
/** An origin the test config's tenant allows: the edge answers it with CORS fields of its own. */
const ORIGIN = 'https://app.example.com';

beforeAll(async () => {
  // A broker whose every answer carries the fields a relay must sort out.
  broker = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, [
      'Content-Type',
      'application/json',
      'Set-Cookie',
      'a=1',
      'Set-Cookie',
      'b=2',
      'X-Request-Id',
      'from-the-broker',
      'Access-Control-Allow-Origin',
      '*',
      'Keep-Alive',
      'timeout=5',
      'Constructor',
      'kept',
      'X-Broker-Note',
      'one',
      'Vary',
      'Accept-Encoding',
      'Timing-Allow-Origin',
      '*',
    ]);
    res.end('{}');
  });
  await new Promise<void>((r) => broker.listen(0, '127.0.0.1', r));
  edge = await startEdge(testConfig([`http://127.0.0.1:${(broker.address() as AddressInfo).port}`]));
  rw = await token({ roles: ['read-write'], tenant: 'acme', sub: 'svc' });
});
afterAll(async () => {
  await edge?.close();
  await new Promise((r) => broker.close(r));
});

describe("the broker's response head, relayed", () => {
  it('HTTP/1.1: repeats kept, hop-by-hop fields dropped, the edge’s request id and CORS fields in place of the broker’s', async () => {
    const r = await call(edge, 'GET', '/api/v1/resources/queues', { token: rw, headers: { 'x-request-id': 'client-chosen-id', origin: ORIGIN } });
    expect(r.status).toBe(200);
    expect(r.headers['set-cookie']).toEqual(['a=1', 'b=2']);
    expect(r.headers['x-request-id']).toBe('client-chosen-id');
    expect(r.headers['access-control-allow-origin']).toBe(ORIGIN);
    expect(r.headers.vary).toBe('Origin');
    expect(r.headers['timing-allow-origin']).toBe(ORIGIN);
    expect(r.headers['keep-alive']).not.toBe('timeout=5');
    expect(r.headers.constructor).toBe('kept');
    expect(r.headers['x-broker-note']).toBe('one');
    expect(r.text).toBe('{}');
  });

  it('HTTP/2: the same head', async () => {
    const session = await h2Session(edge.url);
    try {
      const head = await new Promise<http2Headers>((resolve, reject) => {
        const s = session.request({
          ':method': 'GET',
          ':path': '/api/v1/resources/queues',
          ':authority': 'acme.localhost',
          authorization: `Bearer ${rw}`,
          'x-request-id': 'client-chosen-id',
          origin: ORIGIN,
        });
        s.on('response', (h) => resolve(h as http2Headers));
        s.on('error', reject);
        s.resume();
      });
      expect(head[':status']).toBe(200);
      expect(head['set-cookie']).toEqual(['a=1', 'b=2']);
      expect(head['x-request-id']).toBe('client-chosen-id');
      expect(head['access-control-allow-origin']).toBe(ORIGIN);
      expect(head.vary).toBe('Origin');
      expect(head['timing-allow-origin']).toBe(ORIGIN);
      expect(head['keep-alive']).toBeUndefined();
      expect(head.constructor).toBe('kept');
      expect(head['x-broker-note']).toBe('one');
    } finally {
      session.close();
    }
  });
});

type http2Headers = Record<string, string | string[] | number | undefined>;
