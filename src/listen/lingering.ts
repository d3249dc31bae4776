/**
 * Lingering close of an HTTP/1.1 connection answered before its body was read (docs/limits.md,
 * "Bodies in flight"), as nginx does it. Closing a socket while the client's body is still
 * arriving makes the kernel answer the unread bytes with a reset, and a reset that reaches the
 * client before it read the answer destroys the answer in its receive buffer: the client sees
 * ECONNRESET instead of the 413. So once the answer is out, the edge sends FIN, reads on and
 * discards what still arrives, and closes when the body is complete, the client closes, or a
 * bound is reached: `timeMs` in all, `idleMs` without a byte, `bytes` discarded. Nothing is
 * buffered meanwhile.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';

/** Bounds of one lingering close (server.lingeringClose). */
export interface LingerBounds {
  readonly timeMs: number;
  readonly idleMs: number;
  readonly bytes: number;
}

/**
 * Makes the close Node performs once the last answer on this connection is finished (it calls
 * the socket's destroySoon) a lingering one. Call it before the answer is sent, with
 * `Connection: close` on the answer.
 */
export function lingerOnClose(req: IncomingMessage, bounds: LingerBounds): void {
  const socket = req.socket as Socket & { destroySoon(): void };
  const abrupt = socket.destroySoon;
  if (bounds.timeMs === 0 || bounds.idleMs === 0 || bounds.bytes === 0) return;
  socket.destroySoon = () => {
    // A body already complete leaves nothing to be reset by: the usual close.
    if (req.complete || socket.destroyed) return abrupt.call(socket);
    linger(socket, req, bounds);
  };
}

function linger(socket: Socket, req: IncomingMessage, bounds: LingerBounds): void {
  let discarded = 0;
  const close = (): void => {
    clearTimeout(total);
    clearTimeout(idle);
    socket.destroy();
  };
  const total = setTimeout(close, bounds.timeMs);
  const idle = setTimeout(close, bounds.idleMs);
  socket.end();
  req.on('data', (chunk: Buffer) => {
    discarded += chunk.length;
    if (discarded >= bounds.bytes) close();
    else idle.refresh();
  });
  // The whole body came (anything after it would be a request this connection no longer serves),
  // or the client closed its side, or the socket went.
  req.once('end', close);
  socket.once('end', close);
  socket.once('close', close);
  req.resume();
}
