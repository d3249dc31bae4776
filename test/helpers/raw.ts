/** Raw TLS exchanges, for what an HTTP client library would hide (bodiless 204, reuse). */
import { connect, type TLSSocket } from 'node:tls';
import { waitFor } from './wait.js';

export interface RawConnection {
  /**
   * Sends one request and resolves the raw response head and the bytes that followed it until the
   * body its head announces (Content-Length, chunked, or none) is in. Bytes that arrive after that
   * open the next exchange's answer, so a follow-up request on the connection shows whether
   * anything trailed a response.
   */
  exchange(request: string): Promise<{ head: string; rest: Buffer }>;
  close(): void;
}

/** Whether `body` holds all of the body that `head` announces. */
function bodyComplete(head: string, body: Buffer): boolean {
  const length = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (length) return body.length >= Number(length[1]);
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) return body.indexOf('0\r\n\r\n') === 0 || body.indexOf('\r\n0\r\n\r\n') !== -1;
  return true;
}

export function rawTls(port: number, alpn: string[] = ['http/1.1']): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    const socket: TLSSocket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: alpn, servername: 'localhost' }, () => {
      let buffered = Buffer.alloc(0);
      let closed = false;
      socket.on('data', (d: Buffer) => {
        buffered = Buffer.concat([buffered, d]);
      });
      socket.on('close', () => (closed = true));
      resolve({
        async exchange(req: string) {
          socket.write(req);
          const headEnd = () => buffered.indexOf('\r\n\r\n');
          await waitFor(() => headEnd() !== -1 || closed, 5000, `a response head to ${req.split('\r\n')[0]}`);
          if (headEnd() === -1) throw new Error(`connection closed before a response head; got ${JSON.stringify(buffered.toString())}`);
          const head = buffered.subarray(0, headEnd()).toString('latin1');
          await waitFor(() => bodyComplete(head, buffered.subarray(headEnd() + 4)) || closed, 5000, `the body of ${head.split('\r\n')[0]}`);
          const rest = buffered.subarray(headEnd() + 4);
          // Taken: whatever arrives from now on belongs to the next exchange.
          buffered = Buffer.alloc(0);
          return { head, rest };
        },
        close: () => socket.destroy(),
      });
    });
    socket.once('error', reject);
  });
}
