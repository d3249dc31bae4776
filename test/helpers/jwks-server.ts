/**
 * A tiny JWKS endpoint on 127.0.0.1, port 0: serves whatever keys it holds, and can rotate them,
 * fail with a status, or answer late. Counts every request it receives.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { JWK } from 'jose';

/** A running JWKS endpoint and its switches. */
export interface JwksServer {
  /** The JWKS URL (`http://127.0.0.1:<port>/.well-known/jwks.json`). */
  readonly url: string;
  /** Requests received so far. */
  readonly requests: number;
  /** Serves these keys from the next request on (rotation). */
  setKeys(keys: JWK[]): void;
  /** Answers every request with this status and no keys; null serves keys again. */
  failWith(status: number | null): void;
  /** Holds each response this long before answering. */
  delay(ms: number): void;
  close(): Promise<void>;
}

class JwksTestServer implements JwksServer {
  readonly #server: Server;
  readonly #timers = new Set<NodeJS.Timeout>();
  #keys: JWK[];
  #failStatus: number | null = null;
  #delayMs = 0;
  #requests = 0;
  #url = '';

  constructor(keys: JWK[]) {
    this.#keys = keys;
    this.#server = createServer((_req, res) => {
      this.#requests++;
      const status = this.#failStatus;
      const body = status === null ? JSON.stringify({ keys: this.#keys }) : JSON.stringify({ error: 'unavailable' });
      const answer = (): void => {
        res.writeHead(status ?? 200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      };
      if (this.#delayMs === 0) return answer();
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        answer();
      }, this.#delayMs);
      this.#timers.add(timer);
    });
  }

  get url(): string {
    return this.#url;
  }

  get requests(): number {
    return this.#requests;
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    const { port } = this.#server.address() as AddressInfo;
    this.#url = `http://127.0.0.1:${port}/.well-known/jwks.json`;
    return this;
  }

  setKeys(keys: JWK[]): void {
    this.#keys = keys;
  }

  failWith(status: number | null): void {
    this.#failStatus = status;
  }

  delay(ms: number): void {
    this.#delayMs = ms;
  }

  close(): Promise<void> {
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    return new Promise((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }
}

/** Starts a JWKS server holding `keys`. */
export function startJwksServer(keys: JWK[] = []): Promise<JwksServer> {
  return new JwksTestServer(keys).listen();
}
