/**
 * Meters a broker's answer while it is relayed (docs/operating.md, "Metering"): every chunk goes
 * to the streaming scanner as it passes, so no answer is copied or parsed whole, whatever its size.
 *
 * The edge asks brokers for identity-encoded answers. A broker that compresses anyway is not billed
 * zero: gzip, deflate and br are decoded by a streaming node:zlib decoder for the scanner only (the
 * client gets the bytes as the broker sent them), paced with the relay by backpressure. An encoding
 * it cannot decode (another coding, or a list of them) is reported as such, and the caller meters
 * the exchange from its request instead.
 */
import zlib from 'node:zlib';
import type { Transform } from 'node:stream';
import { AnswerScanner, type AnswerFacts } from './answer-scan.js';

/** How reading an answer ended. */
export type MeterOutcome =
  | { readonly facts: AnswerFacts; readonly problem: null }
  /** `malformed`: cut, or not JSON. `undecodable`: an unknown or broken content coding. */
  | { readonly facts: null; readonly problem: 'malformed' | 'undecodable' };

export interface AnswerMeter {
  /** Reads a relayed chunk; false: the decoder is behind, wait for onDrain before more. */
  write(chunk: Buffer): boolean;
  /** Calls `resume` each time a decoder that was behind caught up. */
  onDrain(resume: () => void): void;
  /** The answer ended: `done` gets what it said, once (later for a compressed answer). */
  end(done: (outcome: MeterOutcome) => void): void;
  /** The answer is abandoned: frees a decoder. */
  discard(): void;
}

/**
 * Decoding for metering stops (the answer is metered as undecodable) past this many decoded bytes
 * and past this ratio to the compressed bytes read: JSON answers compress 5 to 20 times, a gzip
 * bomb about 1000 times, and each decoded byte costs scanner time the relay does not need.
 */
const DECODED_FLOOR_BYTES = 8 * 1024 * 1024;
const MAX_RATIO = 100;

function outcomeOf(facts: AnswerFacts | null): MeterOutcome {
  return facts === null ? { facts: null, problem: 'malformed' } : { facts, problem: null };
}

/** A decoder for one content coding; undefined when the edge has none for it. */
function decoderFor(encoding: string): Transform | undefined {
  switch (encoding) {
    case 'gzip':
    case 'x-gzip':
      return zlib.createGunzip();
    case 'deflate':
      return zlib.createInflate();
    case 'br':
      return zlib.createBrotliDecompress();
    default:
      return undefined;
  }
}

class PlainMeter implements AnswerMeter {
  readonly #scanner = new AnswerScanner();
  write(chunk: Buffer): boolean {
    this.#scanner.write(chunk);
    return true;
  }
  onDrain(): void {}
  end(done: (outcome: MeterOutcome) => void): void {
    done(outcomeOf(this.#scanner.end()));
  }
  discard(): void {}
}

class DecodingMeter implements AnswerMeter {
  readonly #scanner = new AnswerScanner();
  readonly #decoder: Transform;
  #failed = false;
  #ended = false;
  #done: ((outcome: MeterOutcome) => void) | null = null;
  #resume: (() => void) | null = null;
  #read = 0;
  #decoded = 0;

  constructor(decoder: Transform) {
    this.#decoder = decoder;
    decoder.on('data', (chunk: Buffer) => {
      if (this.#failed) return;
      this.#decoded += chunk.length;
      if (this.#decoded > Math.max(DECODED_FLOOR_BYTES, MAX_RATIO * this.#read)) {
        decoder.destroy();
        this.#fail();
      } else this.#scanner.write(chunk);
    });
    decoder.on('error', () => this.#fail());
    decoder.on('end', () => {
      this.#ended = true;
      this.#finish();
    });
  }

  write(chunk: Buffer): boolean {
    this.#read += chunk.length;
    return this.#failed || this.#decoder.write(chunk);
  }

  #fail(): void {
    if (this.#failed) return;
    this.#failed = true;
    // A relay paused for this decoder must not wait for a drain that will never come.
    this.#resume?.();
    this.#finish();
  }

  onDrain(resume: () => void): void {
    this.#resume = resume;
    this.#decoder.on('drain', resume);
  }

  end(done: (outcome: MeterOutcome) => void): void {
    this.#done = done;
    if (this.#failed) this.#finish();
    else this.#decoder.end();
  }

  discard(): void {
    this.#decoder.destroy();
  }

  #finish(): void {
    const done = this.#done;
    if (done === null) return;
    this.#done = null;
    done(this.#failed || !this.#ended ? { facts: null, problem: 'undecodable' } : outcomeOf(this.#scanner.end()));
  }
}

/** Reads nothing of an answer in a coding the edge cannot decode, and says so. */
const UNDECODABLE: AnswerMeter = Object.freeze({
  write: () => true,
  onDrain(): void {},
  end(done: (outcome: MeterOutcome) => void): void {
    done({ facts: null, problem: 'undecodable' });
  },
  discard(): void {},
});

/** A meter for an answer sent with `contentEncoding` (the header's value; null when absent). */
export function openAnswerMeter(contentEncoding: string | null): AnswerMeter {
  const encoding = contentEncoding?.trim().toLowerCase() ?? '';
  if (encoding === '' || encoding === 'identity') return new PlainMeter();
  const decoder = decoderFor(encoding);
  return decoder === undefined ? UNDECODABLE : new DecodingMeter(decoder);
}
