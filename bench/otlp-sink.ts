/**
 * A collector for the tracing rows: takes OTLP/HTTP export requests and answers them at once, as
 * a collector with room does, counting requests and bytes (nothing is decoded: its CPU is not
 * what the rows measure).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface OtlpSink {
  /** http://127.0.0.1:<port>/v1/traces */
  readonly url: string;
  readonly requests: number;
  readonly bytes: number;
  close(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  let requests = 0;
  let bytes = 0;
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => {
      bytes += c.length;
    });
    req.on('end', () => {
      requests++;
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`,
    get requests() {
      return requests;
    },
    get bytes() {
      return bytes;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
