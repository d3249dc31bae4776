/**
 * The development broker (examples/dev-broker.ts, NOT FOR PRODUCTION) as a container's process,
 * for docker-compose.yml's `dev` profile. The broker binds loopback only, which no other container
 * reaches, so a TCP relay on 0.0.0.0 carries connections to it unchanged (byte for byte: the edge
 * talks to the broker exactly as it would without the relay).
 */
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { pathToFileURL } from 'node:url';
import { startDevBroker } from '../examples/dev-broker.js';

export interface RelayedDevBroker {
  /** The relay's port (the one asked for, or the one given for 0). */
  readonly port: number;
  close(): Promise<void>;
}

/** Starts the development broker on a loopback port and a relay to it on host:port. */
export async function startRelayedDevBroker(port: number, host = '0.0.0.0'): Promise<RelayedDevBroker> {
  const broker = await startDevBroker(0);
  const target = Number(new URL(broker.url).port);
  const open = new Set<Socket>();
  const relay: Server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    open.add(client);
    client.once('close', () => {
      open.delete(client);
      upstream.destroy();
    });
    client.pipe(upstream).pipe(client);
    // pipe() carries each end across; an error on either side ends both.
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    relay.once('error', reject);
    relay.listen(port, host, () => resolve());
  });
  return {
    port: (relay.address() as AddressInfo).port,
    async close() {
      // The edge keeps its connections alive: end them, or close() would wait for them forever.
      const closed = new Promise<void>((resolve) => relay.close(() => resolve()));
      for (const s of open) s.destroy();
      await closed;
      await broker.close();
    },
  };
}

if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) {
  const b = await startRelayedDevBroker(Number(process.env.PORT ?? 6632));
  console.log(`development broker (in memory, NOT FOR PRODUCTION) on 0.0.0.0:${b.port}`);
  const stop = (): void => void b.close().then(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
