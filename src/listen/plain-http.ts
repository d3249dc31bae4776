/**
 * Plain HTTP sent to the HTTPS port gets a plain-HTTP `400` saying to use https (as nginx answers
 * "The plain HTTP request was sent to HTTPS port"), instead of a TLS failure that a client shows
 * as an empty reply. Every TLS connection starts with a handshake record (first byte 0x16): the
 * first byte is read before the TLS layer sees the socket, put back, and the socket handed over;
 * Node's TLS socket takes bytes already read from its socket. A connection that sends nothing is
 * closed after `deadlineMs`, as the TLS handshake deadline would have.
 */
import type { Socket } from 'node:net';
import type tls from 'node:tls';
import { edgeError, renderError } from '../errors.js';

const TLS_HANDSHAKE = 0x16;

function plainAnswer(): string {
  const r = renderError(edgeError('invalid_request', 'plain HTTP was sent to the HTTPS port: use https://'));
  const head = Object.entries({ ...r.headers, connection: 'close' }).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  return `HTTP/1.1 ${r.status} Bad Request\r\n${head}\r\n${r.body}`;
}

/** Puts the first-byte check in front of `server`'s TLS connection handling. */
export function answerPlainHttp(server: tls.Server, deadlineMs: number): void {
  const tlsListeners = server.listeners('connection') as Array<(socket: Socket) => void>;
  for (const l of tlsListeners) server.removeListener('connection', l);
  const answer = plainAnswer();
  server.on('connection', (socket: Socket) => {
    const fail = (): void => void socket.destroy();
    socket.on('error', fail);
    socket.setTimeout(deadlineMs, fail);
    socket.once('readable', () => {
      socket.off('error', fail);
      socket.setTimeout(0);
      const first = socket.read(1) as Buffer | null;
      if (first === null) return void socket.destroy();
      socket.unshift(first);
      if (first[0] === TLS_HANDSHAKE) {
        for (const l of tlsListeners) l.call(server, socket);
        return;
      }
      // The rest of the request is read and dropped, so the client's end is seen and the socket
      // closes; a client that never ends it is cut at the deadline.
      socket.on('error', fail);
      socket.setTimeout(deadlineMs, fail);
      socket.resume();
      socket.end(answer);
    });
  });
}
