/** Loopback ports for tests and scripts that must name a port before something listens on it. */
import { createServer } from 'node:net';

/** A port that was free a moment ago on 127.0.0.1 (bound to 0 and released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen({ host: '127.0.0.1', port: 0 }, () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
