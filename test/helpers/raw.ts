/** Raw TLS exchanges, for what an HTTP client library would hide (bodiless 204, reuse). */
import { connect, type TLSSocket } from 'node:tls';

export interface RawConnection {
  /** Sends one request and resolves the raw response head and the bytes that followed it within `settleMs`. */
  exchange(request: string, settleMs?: number): Promise<{ head: string; rest: Buffer }>;
  close(): void;
}

export function rawTls(port: number, alpn: string[] = ['http/1.1']): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    const socket: TLSSocket = connect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: alpn, servername: 'localhost' }, () => {
      let buffered = Buffer.alloc(0);
      socket.on('data', (d: Buffer) => {
        buffered = Buffer.concat([buffered, d]);
      });
      resolve({
        async exchange(req: string, settleMs = 150) {
          buffered = Buffer.alloc(0);
          socket.write(req);
          const deadline = Date.now() + 5000;
          while (buffered.indexOf('\r\n\r\n') === -1) {
            if (Date.now() > deadline || socket.destroyed) throw new Error(`no response head; got ${JSON.stringify(buffered.toString())}`);
            await new Promise((r) => setTimeout(r, 10));
          }
          await new Promise((r) => setTimeout(r, settleMs));
          const end = buffered.indexOf('\r\n\r\n');
          return { head: buffered.subarray(0, end).toString('latin1'), rest: buffered.subarray(end + 4) };
        },
        close: () => socket.destroy(),
      });
    });
    socket.once('error', reject);
  });
}
