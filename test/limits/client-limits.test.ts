import { describe, expect, it } from 'vitest';
import { clientKey, createClientLimits } from '../../src/limits/client-limits.js';
import { craftToken } from '../helpers/tokens.js';

describe('clientKey', () => {
  it.each([
    ['203.0.113.7', '203.0.113.7'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['2001:0db8:0001:0002::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['64:ff9b::192.0.2.1', '192.0.2.1'],
    ['64:ff9b::c000:201', '192.0.2.1'],
    ['64:FF9B:0:0:0:0:C633:6407', '198.51.100.7'],
    ['::ffff:198.51.100.7', '198.51.100.7'],
    ['::ffff:c633:6407', '198.51.100.7'],
    ['64:ff9b:1::c000:201', '64:ff9b:1:0::/64'],
  ])('%s -> %s', (address, key) => {
    expect(clientKey(address)).toBe(key);
  });
});

const tokenOf = (sub: string | undefined, iss = 'https://idp.example'): string =>
  craftToken({ alg: 'HS256' }, sub === undefined ? { iss } : { iss, sub }, 'sig');
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('createClientLimits', () => {
  it("locks out the identity that failed, from that address only, not another identity's tokens", async () => {
    const limits = createClientLimits({ failedAuth: { attempts: 2, windowSec: 60, signaturesPerSec: 0 }, publicRoutes: { requests: 0, windowSec: 60 } });
    for (let i = 0; i < 2; i++) {
      const gate = limits.signatureGate('a', tokenOf('mallory'));
      expect(await gate.admit()).toBeNull();
      gate.settled(false);
    }
    await tick();
    const blocked = await limits.signatureGate('a', tokenOf('mallory')).admit();
    expect(blocked?.code).toBe('rate_limited');
    expect(blocked?.retryAfterSec).toBeGreaterThan(0);
    expect(await limits.signatureGate('a', tokenOf('alice')).admit()).toBeNull();
    expect(await limits.signatureGate('a', tokenOf('mallory', 'https://other.example')).admit()).toBeNull();
    expect(await limits.signatureGate('b', tokenOf('mallory')).admit()).toBeNull();
    // requests: 0 turns the public limit off.
    for (let i = 0; i < 5; i++) expect(await limits.publicRequest('a')).toBeNull();
  });

  it('caps signature checks per address per second; an identity that verified lately has a budget of its own', async () => {
    const limits = createClientLimits({ failedAuth: { attempts: 0, windowSec: 60, signaturesPerSec: 3 }, publicRoutes: { requests: 0, windowSec: 60 } });
    const known = limits.signatureGate('a', tokenOf('alice'));
    expect(await known.admit()).toBeNull();
    known.settled(true);
    for (let i = 0; i < 2; i++) expect(await limits.signatureGate('a', tokenOf(`random-${i}`)).admit()).toBeNull();
    const over = await limits.signatureGate('a', tokenOf('random-x')).admit();
    expect(over).toMatchObject({ code: 'rate_limited', message: 'too many token signature checks from this address' });
    expect(await limits.signatureGate('a', tokenOf('alice')).admit()).toBeNull();
    expect(await limits.signatureGate('b', tokenOf('random-x')).admit()).toBeNull();
  });
});
