/**
 * The edge's subscribed connections (directory changes, key revocations, change pokes) subscribe
 * again after every reconnect themselves. ioredis's own resubscribe left its promise unhandled: a
 * SUBSCRIBE refused or timed out after a reconnect ended the worker, and a request the cluster
 * primary had handed to it was never answered. Here the resubscribe is refused (an ACL without
 * the channel), then allowed again: the failure is reported, nothing is left unhandled, and the
 * subscription comes back by itself.
 */
import { createServer, type AddressInfo, type Socket } from 'node:net';
import type { Redis } from 'ioredis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { connectRedis, subscriberFor, type RedisClient } from '../../src/redis/connection.js';
import { connectTest, PrivateRedis } from '../helpers/redis.js';
import { waitFor } from '../helpers/wait.js';

let server: PrivateRedis;
let admin: Redis;
beforeAll(async () => {
  server = await PrivateRedis.start();
  admin = await connectTest(server.url, 2000);
});
afterAll(async () => {
  admin.disconnect();
  await server.kill();
});

it('a refused resubscribe after a reconnect is reported and tried again, never left unhandled', async () => {
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown): void => void unhandled.push(reason);
  process.on('unhandledRejection', onUnhandled);
  await admin.call('ACL', 'SETUSER', 'sub', 'on', '>pw-0123456789', '~*', '&*', '+@all');
  const client: RedisClient = connectRedis({ url: server.url.replace('redis://', 'redis://sub:pw-0123456789@'), cluster: [], timeoutMs: 50 })!;
  const subscribed: number[] = [];
  const failures: string[] = [];
  const messages: string[] = [];
  const sub = subscriberFor(client, [], ['news'], {
    subscribed: () => subscribed.push(Date.now()),
    failed: (err) => failures.push((err as Error).message),
  });
  sub.connection.on('message', (_channel: string, message: string) => messages.push(message));
  try {
    expect(await sub.first).toBe(true);
    await admin.publish('news', 'one');
    await waitFor(() => messages.includes('one'), 5000, 'the first message');

    // The channel forbidden, the connection dropped: the reconnect's SUBSCRIBE is refused.
    await admin.call('ACL', 'SETUSER', 'sub', 'resetchannels');
    await admin.call('CLIENT', 'KILL', 'USER', 'sub');
    await waitFor(() => failures.length > 0, 10_000, 'the refused resubscribe reported');
    expect(failures[0]).toMatch(/NOPERM/);

    // Allowed again: the next try (a second later at first) takes, and messages flow.
    await admin.call('ACL', 'SETUSER', 'sub', '&news');
    await waitFor(() => subscribed.length >= 2, 10_000, 'subscribed again');
    await waitFor(
      async () => {
        await admin.publish('news', 'two');
        return messages.includes('two');
      },
      5000,
      'a message after the resubscribe',
    );
    expect(subscribed.length).toBe(2);
    expect(unhandled).toEqual([]);
  } finally {
    process.off('unhandledRejection', onUnhandled);
    sub.connection.disconnect();
    client.disconnect();
  }
});

it('a subscriber started with Redis down settles its first attempt as failed, and subscribes once Redis is up', async () => {
  const later = await PrivateRedis.start();
  await later.kill();
  const client = connectRedis({ url: later.url, cluster: [], timeoutMs: 50 })!;
  const messages: string[] = [];
  let subscribed = 0;
  const sub = subscriberFor(client, [], ['news'], { subscribed: () => void subscribed++, failed: () => {} });
  sub.connection.on('message', (_channel: string, message: string) => messages.push(message));
  try {
    expect(await sub.first).toBe(false);
    await later.restart();
    await waitFor(() => subscribed === 1, 10_000, 'subscribed once Redis is up');
    const publisher = await connectTest(later.url, 2000);
    try {
      await publisher.publish('news', 'hello');
      await waitFor(() => messages.includes('hello'), 5000, 'the message');
    } finally {
      publisher.disconnect();
    }
  } finally {
    sub.connection.disconnect();
    client.disconnect();
    await later.kill();
  }
});

it('a server that accepts and hangs up at once (no error event), or a close during the start, settles the first attempt as failed', async () => {
  const sockets = new Set<Socket>();
  const hangUp = createServer((socket) => {
    sockets.add(socket);
    socket.end();
  });
  await new Promise<void>((resolve) => hangUp.listen(0, '127.0.0.1', resolve));
  const client = connectRedis({ url: `redis://127.0.0.1:${(hangUp.address() as AddressInfo).port}`, cluster: [], timeoutMs: 50 })!;
  const hungUp = subscriberFor(client, [], ['news'], { subscribed: () => {}, failed: () => {} });
  const closedEarly = subscriberFor(client, [], ['news'], { subscribed: () => {}, failed: () => {} });
  closedEarly.close();
  try {
    expect(await Promise.all([hungUp.first, closedEarly.first])).toEqual([false, false]);
  } finally {
    hungUp.close();
    client.disconnect();
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => hangUp.close(() => resolve()));
  }
});
