import { describe, expect, it } from 'vitest';
import { createClientAddresses, invalidProxyRanges } from '../../src/net/client-address.js';

describe('client address', () => {
  const none = createClientAddresses([]);
  const lb = createClientAddresses(['10.0.0.0/8', '2001:db8:ffff::/48', '192.0.2.1']);

  it.each([
    // No trusted proxies: the socket peer, whatever the header says.
    [none, '203.0.113.7', '198.51.100.1', '203.0.113.7'],
    [none, '::ffff:203.0.113.7', undefined, '203.0.113.7'],
    // The peer is no trusted proxy: its header is the client's own writing.
    [lb, '203.0.113.7', '198.51.100.1', '203.0.113.7'],
    // Right-most entry not trusted; entries the client wrote to the left are not read.
    [lb, '10.0.0.1', '6.6.6.6, 198.51.100.1', '198.51.100.1'],
    [lb, '::ffff:10.0.0.1', '6.6.6.6, 198.51.100.1, 10.1.2.3', '198.51.100.1'],
    [lb, '10.0.0.1', ['6.6.6.6', '198.51.100.1, 192.0.2.1'], '198.51.100.1'],
    [lb, '2001:db8:ffff::5', '2001:db8:1::9', '2001:db8:1::9'],
    // Every hop trusted: the left-most; a hop that is no address: the last good one.
    [lb, '10.0.0.1', '10.0.0.2, 10.0.0.3', '10.0.0.2'],
    [lb, '10.0.0.1', 'unknown, 10.0.0.3', '10.0.0.3'],
    [lb, '10.0.0.1', undefined, '10.0.0.1'],
  ])('%#: peer %s, X-Forwarded-For %s -> %s', (addresses, peer, xff, client) => {
    expect(addresses.of(peer, xff)).toBe(client);
  });

  it('trusts only listed peers', () => {
    expect([lb.trusts('10.9.9.9'), lb.trusts('::ffff:10.9.9.9'), lb.trusts('192.0.2.2'), lb.trusts(undefined), none.trusts('10.0.0.1')]).toEqual([
      true,
      true,
      false,
      false,
      false,
    ]);
  });

  it('reports entries that are not addresses or ranges', () => {
    expect(invalidProxyRanges(['10.0.0.0/8', '::1', '10.0.0.0/33', 'proxy.local', '1.2.3.4/x', '::/0'])).toEqual(['10.0.0.0/33', 'proxy.local', '1.2.3.4/x']);
  });
});
