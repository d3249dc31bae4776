import { describe, expect, it } from 'vitest';
import { acceptableRequestId } from '../../src/listen/transport.js';
import { contentEncodingRefusal, upstreamHeaders, validTraceparent, validTracestate } from '../../src/upstream/upstream-headers.js';

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const facts = {
  clientIp: '10.0.0.9',
  proto: 'https' as const,
  host: 'acme.queen.example.com',
  requestId: 'r1',
  trustProxy: false,
  authorization: 'Bearer t',
  tenantHeader: null,
  contentLength: 12,
  baggage: false,
};

describe('contentEncodingRefusal', () => {
  it.each([
    [undefined, false],
    ['identity', false],
    [' Identity ', false],
    ['gzip', true],
    ['gzip, identity', true],
    ['br', true],
  ])('Content-Encoding %s: refused %s', (v, refused) => {
    expect(contentEncodingRefusal(v === undefined ? {} : { 'content-encoding': v }) !== null).toBe(refused);
  });
});

describe('upstreamHeaders', () => {
  it('forwards only the allowlist and what the edge sets', () => {
    const out = upstreamHeaders(
      {
        'content-type': 'application/json',
        accept: '*/*',
        'accept-encoding': 'gzip, br',
        traceparent: TP,
        cookie: 'sid=1',
        host: 'evil',
        connection: 'keep-alive, x-foo',
        'x-queen-tenant': 'other',
        'x-forwarded-for': '1.2.3.4',
        'x-forwarded-host': 'spoof',
        authorization: 'Bearer client',
      },
      facts,
    );
    expect(out).toEqual({
      'content-type': 'application/json',
      accept: '*/*',
      'accept-encoding': 'identity',
      traceparent: TP,
      'x-forwarded-for': '10.0.0.9',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'acme.queen.example.com',
      'x-request-id': 'r1',
      authorization: 'Bearer t',
      'content-length': '12',
    });
  });

  it('appends to X-Forwarded-For only behind a trusted proxy, and adds the tenant header when asked', () => {
    const out = upstreamHeaders(
      { 'x-forwarded-for': '1.2.3.4' },
      { ...facts, trustProxy: true, authorization: null, tenantHeader: 'acme', contentLength: null },
    );
    expect(out['x-forwarded-for']).toBe('1.2.3.4, 10.0.0.9');
    expect(out['x-queen-tenant']).toBe('acme');
    expect(out.authorization).toBeUndefined();
  });

  it('keeps plain client request ids only', () => {
    expect(acceptableRequestId('abc-123')).toBe('abc-123');
    expect(acceptableRequestId('a b')).toBeUndefined();
    expect(acceptableRequestId(['a', 'b'])).toBeUndefined();
    expect(acceptableRequestId('x'.repeat(200))).toBeUndefined();
  });

  it('relays baggage only when the operator asks for it, and only printable and bounded', () => {
    const baggage = 'userId=alice,isProduction=false';
    expect(upstreamHeaders({ baggage }, facts).baggage).toBeUndefined();
    expect(upstreamHeaders({ baggage }, { ...facts, baggage: true }).baggage).toBe(baggage);
    expect(upstreamHeaders({ baggage: 'a=b\r\nx: y' }, { ...facts, baggage: true }).baggage).toBeUndefined();
    expect(upstreamHeaders({ baggage: `a=${'x'.repeat(8192)}` }, { ...facts, baggage: true }).baggage).toBeUndefined();
  });

  it('forwards trace context only when it is valid W3C, and tracestate only with its traceparent', () => {
    expect(upstreamHeaders({ traceparent: TP, tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7' }, facts)).toMatchObject({
      traceparent: TP,
      tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7',
    });
    const bad = upstreamHeaders({ traceparent: '00-aaaa-bbbb-01', tracestate: 'congo=t61rcWkgMzE' }, facts);
    expect(bad.traceparent).toBeUndefined();
    expect(bad.tracestate).toBeUndefined();
    expect(upstreamHeaders({ traceparent: TP, tracestate: 'a=b\r\nx: y' }, facts).tracestate).toBeUndefined();
  });

  it.each([
    [TP, true],
    ['01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future', true],
    ['00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra', false],
    ['ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', false],
    ['00-00000000000000000000000000000000-00f067aa0ba902b7-01', false],
    ['00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01', false],
    ['00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01', false],
    ['00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n', false],
  ])('traceparent %j valid: %s', (v, ok) => {
    expect(validTraceparent(v)).toBe(ok);
  });

  it.each([
    ['congo=t61rcWkgMzE', true],
    ['rojo=00f067aa0ba902b7, congo=t61rcWkgMzE', true],
    ['tenant@vendor=x', true],
    ['', true],
    ['Upper=x', false],
    ['a=b=c', false],
    ['a=', false],
    [Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(','), false],
    [`k=${'v'.repeat(600)}`, false],
  ])('tracestate %j valid: %s', (v, ok) => {
    expect(validTracestate(v)).toBe(ok);
  });

  it('sends X-Forwarded-Host only for a host the edge resolved', () => {
    expect(upstreamHeaders({}, { ...facts, host: null })['x-forwarded-host']).toBeUndefined();
  });
});
