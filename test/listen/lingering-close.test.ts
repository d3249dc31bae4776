/**
 * Lingering close (docs/limits.md, "Bodies in flight"): an HTTP/1.1 upload refused before its body
 * was read gets its answer, not a connection reset. A connection closed while the body still
 * arrives is reset by the kernel, and a reset that reaches a client before it read the answer
 * makes the client's next write fail, which a client that had not read the answer yet reports
 * instead of it. The client here reads only once its whole upload is sent, as a busy client would;
 * its upload is larger than the kernel buffers absorb, so on a closed connection a write fails.
 * The bounds are raised above the upload, which a client that does not read must fit within.
 */
import { connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEdge, testConfig, token, type EdgeHarness } from '../helpers/edge.js';

/** Uploads `size` bytes without reading, then reads: what arrived before the connection ended, and its error code if it ended with one. */
async function uploadThenRead(port: number, head: string, size: number, tls: boolean): Promise<{ answer: string; error: string | null }> {
  const socket: Socket = tls
    ? tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, ALPNProtocols: ['http/1.1'] })
    : connect({ host: '127.0.0.1', port });
  let error: string | null = null;
  socket.on('error', (err: NodeJS.ErrnoException) => {
    error = err.code ?? err.message;
  });
  await new Promise<void>((resolve) => socket.once(tls ? 'secureConnect' : 'connect', () => resolve()));
  socket.pause();
  socket.write(head);
  // Written in one go: its callback runs once the kernel took every byte, or the connection failed.
  await new Promise<void>((resolve) => socket.write(Buffer.alloc(size, 0x20), () => resolve()));
  let answer = '';
  socket.on('data', (d: Buffer) => {
    answer += d.toString('latin1');
  });
  socket.resume();
  await new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { answer, error };
}

describe('lingering close', () => {
  let h: EdgeHarness;
  let tok: string;

  beforeAll(async () => {
    h = await startEdge(
      testConfig(['http://127.0.0.1:9'], { server: { bodyLimitBytes: 100_000, lingeringClose: { bytes: 32 * 1024 * 1024, idleMs: 5000, timeMs: 10_000 } } }),
    );
    tok = await token({ roles: ['read-write'], tenant: 'acme' });
  });

  afterAll(async () => {
    await h?.close();
  });

  it.each([
    ['plain HTTP/1.1', false],
    ['HTTP/1.1 over TLS', true],
  ])('%s: a client uploading over the body limit always reads its 413, never a reset', async (_, tls) => {
    const port = Number(new URL(tls ? h.url : h.httpUrl).port);
    const size = 16 * 1024 * 1024;
    const head = `POST /api/v1/push HTTP/1.1\r\nhost: acme.localhost\r\nauthorization: Bearer ${tok}\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\n\r\n`;
    for (let i = 0; i < 4; i++) {
      const { answer, error } = await uploadThenRead(port, head, size, tls);
      expect({ status: answer.slice(0, 12), error }).toEqual({ status: 'HTTP/1.1 413', error: null });
      expect(answer.toLowerCase()).toContain('connection: close');
    }
  });
});
