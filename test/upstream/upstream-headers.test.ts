import { describe, expect, it } from 'vitest';
import { acceptableRequestId, upstreamHeaders } from '../../src/upstream/upstream-headers.js';

const facts = { clientIp: '10.0.0.9', proto: 'https' as const, host: 'acme.queen.example.com', requestId: 'r1', trustProxy: false, authorization: 'Bearer t', tenantHeader: null, contentLength: 12 };

describe('upstreamHeaders', () => {
  it('forwards only the allowlist and what the edge sets', () => {
    const out = upstreamHeaders(
      {
        'content-type': 'application/json',
        accept: '*/*',
        traceparent: '00-aaaa-bbbb-01',
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
      traceparent: '00-aaaa-bbbb-01',
      'x-forwarded-for': '10.0.0.9',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'acme.queen.example.com',
      'x-request-id': 'r1',
      authorization: 'Bearer t',
      'content-length': '12',
    });
  });

  it('appends to X-Forwarded-For only behind a trusted proxy, and adds the tenant header when asked', () => {
    const out = upstreamHeaders({ 'x-forwarded-for': '1.2.3.4' }, { ...facts, trustProxy: true, authorization: null, tenantHeader: 'acme', contentLength: null });
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
});
