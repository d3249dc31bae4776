/**
 * Request ids: random UUIDs (version 4), as crypto.randomUUID() makes them, at a fraction of its
 * garbage. randomUUID() joins 20 short strings per id (about 580 bytes of intermediate strings,
 * measured with the heap sampler in the bench); this writes the 36 characters into one buffer and
 * reads them out as one string. The randomness is the same: crypto's, drawn 4 KiB at a time.
 */
import { randomFillSync } from 'node:crypto';

const HEX = Buffer.from('0123456789abcdef', 'latin1');
const POOL_IDS = 256;
const pool = Buffer.alloc(16 * POOL_IDS);
let at = pool.length;
const text = Buffer.alloc(36);

/** A new random UUID in its canonical lower-case form. */
export function newRequestId(): string {
  if (at === pool.length) {
    randomFillSync(pool);
    at = 0;
  }
  // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8 (RFC 9562).
  pool[at + 6] = (pool[at + 6]! & 0x0f) | 0x40;
  pool[at + 8] = (pool[at + 8]! & 0x3f) | 0x80;
  let o = 0;
  for (let i = 0; i < 16; i++) {
    if (i === 4 || i === 6 || i === 8 || i === 10) text[o++] = 0x2d;
    const b = pool[at + i]!;
    text[o++] = HEX[b >> 4]!;
    text[o++] = HEX[b & 0x0f]!;
  }
  at += 16;
  return text.toString('latin1');
}
