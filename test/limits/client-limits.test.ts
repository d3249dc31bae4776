import { describe, expect, it } from 'vitest';
import { clientKey, createClientLimits } from '../../src/limits/client-limits.js';

describe('clientKey', () => {
  it.each([
    ['203.0.113.7', undefined, false, '203.0.113.7'],
    ['::ffff:203.0.113.7', undefined, false, '203.0.113.7'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', undefined, false, '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002::1', undefined, false, '2001:db8:1:2::/64'],
    ['2001:db8::1', undefined, false, '2001:db8:0:0::/64'],
    ['::1', undefined, false, '0:0:0:0::/64'],
    ['10.0.0.1', '198.51.100.1, 203.0.113.9', true, '203.0.113.9'],
    ['10.0.0.1', '198.51.100.1, 203.0.113.9', false, '10.0.0.1'],
  ])('%s (X-Forwarded-For %s, trustProxy %s) -> %s', (remote, xff, trust, key) => {
    expect(clientKey(remote, xff, trust)).toBe(key);
  });
});

describe('createClientLimits', () => {
  it('blocks an address after its failures, not another address', async () => {
    const limits = createClientLimits({ failedAuth: { attempts: 2, windowSec: 60 }, publicRoutes: { requests: 0, windowSec: 60 } });
    expect(await limits.authBlocked('a')).toBeNull();
    limits.authFailed('a');
    limits.authFailed('a');
    await new Promise((r) => setImmediate(r));
    const blocked = await limits.authBlocked('a');
    expect(blocked?.code).toBe('rate_limited');
    expect(blocked?.retryAfterSec).toBeGreaterThan(0);
    expect(await limits.authBlocked('b')).toBeNull();
    // requests: 0 turns the public limit off.
    for (let i = 0; i < 5; i++) expect(await limits.publicRequest('a')).toBeNull();
  });
});
