import { describe, expect, it } from 'vitest';
import { compileCorsPolicy, preflightVerdict } from '../../src/cors/policy.js';

describe('CORS policy', () => {
  const policy = compileCorsPolicy(['https://app.example.com', 'https://*.acme.io', 'http://localhost:5173']);

  it.each([
    ['https://app.example.com', true],
    ['https://APP.example.com', true],
    ['http://app.example.com', false],
    ['https://app.example.com:8443', false],
    ['https://eu.acme.io', true],
    ['https://a.b.acme.io', true],
    ['https://acme.io', false],
    ['https://evilacme.io', false],
    ['https://acme.io.evil.com', false],
    ['http://localhost:5173', true],
    ['http://localhost:5174', false],
    ['null', false],
  ])('%s allowed=%s', (origin, allowed) => {
    expect(policy.allows(origin)).toBe(allowed);
  });

  it('an empty list allows nothing; * allows any well-formed origin', () => {
    expect(compileCorsPolicy([]).enabled).toBe(false);
    expect(compileCorsPolicy([]).allows('https://a.com')).toBe(false);
    const any = compileCorsPolicy(['*']);
    expect(any.allows('https://whatever.dev')).toBe(true);
    expect(any.allows('not an origin')).toBe(false);
  });

  it('answers an allowed preflight with the echoed origin and only allowed request headers', () => {
    const v = preflightVerdict(policy, 'https://eu.acme.io', 'POST', 'Authorization, Content-Type, X-Evil');
    expect(v).toEqual({
      allowed: true,
      headers: {
        'access-control-allow-origin': 'https://eu.acme.io',
        'access-control-allow-methods': 'GET, POST, PUT, DELETE, PATCH',
        'access-control-allow-headers': 'authorization, content-type',
        'access-control-max-age': '600',
        vary: 'Origin, Access-Control-Request-Method, Access-Control-Request-Headers',
      },
    });
  });

  it('refuses a preflight from another origin or for an unknown method', () => {
    expect(preflightVerdict(policy, 'https://evil.com', 'POST', undefined).allowed).toBe(false);
    expect(preflightVerdict(policy, 'https://app.example.com', 'TRACE', undefined).allowed).toBe(false);
  });

  it.each(['GE', 'T, D', 'ET', 'POST, PUT', '', ' GET'])('refuses a preflight method that is only part of the allowed list: %j', (method) => {
    const policy = compileCorsPolicy(['https://app.example.com']);
    expect(preflightVerdict(policy, 'https://app.example.com', method, undefined).allowed).toBe(false);
  });

  it.each(['GET', 'patch', 'OPTIONS'])('allows the listed method %s', (method) => {
    const policy = compileCorsPolicy(['https://app.example.com']);
    expect(preflightVerdict(policy, 'https://app.example.com', method, undefined).allowed).toBe(true);
  });
});
