/**
 * Reads what metering and lease learning need from a broker's answer as it streams past, without
 * keeping it (docs/operating.md, "Metering"): a byte-level JSON tokenizer that tracks nesting depth,
 * strings and escapes, and only the keys the counting rules of counts.ts look at. Memory is a few
 * fields plus a 256-byte buffer for the short strings it compares, whatever the answer's size or
 * nesting; long strings it does not need are skipped with Buffer#indexOf, short ones by a plain loop.
 *
 * It agrees with JSON.parse on every valid document (duplicate keys: the last one wins). It checks
 * the structure (brackets, keys, colons, commas, one top-level value) and the literals, but not the
 * form of numbers nor control characters inside strings: a broker's answer is made by a JSON
 * library, and a structurally broken one (a cut body) is what has to be told apart.
 */

/** What an answer says, for every meter kind at once (each route reads its own field). */
export interface AnswerFacts {
  /** Items of a top-level array whose `status` is `queued`, `duplicate` or `buffered` (push). */
  readonly pushed: number;
  /** Items of a top-level array whose `success` is true (ack, ack batch). */
  readonly acked: number;
  /** Length of the top-level object's `messages` array (pop). */
  readonly delivered: number;
  /** The top-level object's `success` is true (a transaction the broker committed). */
  readonly committed: boolean;
  /** The top-level object's `leaseId`, when it is a string (pop: routes the acks that follow). */
  readonly leaseId: string | null;
}

// Tokenizer states.
const VALUE = 0; // a value is expected (after `[`, `:`, an array's `,`, or at the start)
const KEY = 1; // a key is expected (after `{` or an object's `,`)
const COLON = 2;
const AFTER = 3; // after a value: `,`, a closer, or the end
const STRING = 4;
const SCALAR = 5; // a number or a literal
const DONE = 6; // the top-level value ended: whitespace only
const ERROR = 7;

const ARRAY = 1;
const OBJECT = 2;

// What the value being read means to metering (from the key before it).
const NONE = 0;
const MESSAGES = 1; // top-level `messages`
const LEASE_ID = 2; // top-level `leaseId`
const TOP_SUCCESS = 3; // top-level `success`
const STATUS = 4; // a top-level array item's `status`
const ITEM_SUCCESS = 5; // a top-level array item's `success`

/** Container kinds kept exactly; deeper levels are only counted (nothing metered lives there). */
const TRACKED_DEPTH = 64;
/** Longest string compared or kept (a leaseId is a 36-character UUID; keys are shorter). */
const CAPTURE_BYTES = 256;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

const KEY_NAMES: ReadonlyArray<readonly [Buffer, number, number]> = [
  // [name, role at depth 1 (top-level object), role at depth 2 (item of a top-level array)]
  [Buffer.from('messages'), MESSAGES, NONE],
  [Buffer.from('leaseId'), LEASE_ID, NONE],
  [Buffer.from('success'), TOP_SUCCESS, ITEM_SUCCESS],
  [Buffer.from('status'), NONE, STATUS],
];
const ACCEPTED_STATUSES: readonly Buffer[] = ['queued', 'duplicate', 'buffered'].map((s) => Buffer.from(s));
const LITERALS: readonly Buffer[] = ['true', 'false', 'null'].map((s) => Buffer.from(s));
const TRUE = LITERALS[0]!;

/** True for bytes that may appear in a number or a literal. */
function scalarByte(b: number): boolean {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x61 && b <= 0x7a) || (b >= 0x41 && b <= 0x5a) || b === 0x2d || b === 0x2b || b === 0x2e;
}

function whitespace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

/** Feed an answer chunk by chunk with write(), then call end() once. */
export class AnswerScanner {
  #state = VALUE;
  /** The container just opened: its closer may come before any member. */
  #opened = false;
  #depth = 0;
  readonly #kinds = new Uint8Array(TRACKED_DEPTH);
  #role = NONE;

  // The string being read.
  #isKey = false;
  #capturing = false;
  /** The previous byte of the string was an escaping backslash. */
  #escaped = false;
  #hasEscape = false;
  readonly #buf = Buffer.allocUnsafe(CAPTURE_BYTES);
  #len = 0;
  /** The captured string or scalar outgrew the buffer: it equals nothing compared. */
  #over = false;

  // Facts.
  #pushed = 0;
  #acked = 0;
  #popCount = 0;
  #popIsArray = false;
  #inMessages = false;
  #inItem = false;
  #itemAccepted = false;
  #itemSuccess = false;
  #committed = false;
  #leaseId: string | null = null;

  /** Reads one chunk; returns nothing, as nothing of the chunk is kept. */
  write(chunk: Uint8Array): void {
    const n = chunk.length;
    let i = 0;
    while (i < n && this.#state !== ERROR) {
      const st = this.#state;
      if (st === STRING) {
        i = this.#capturing ? this.#captureString(chunk, i) : this.#skipString(chunk, i);
        continue;
      }
      const b = chunk[i]!;
      if (st === SCALAR) {
        if (scalarByte(b)) {
          this.#keep(b);
          i++;
          continue;
        }
        this.#endScalar();
        continue; // the byte that ended the scalar is read in the state that follows
      }
      i++;
      if (whitespace(b)) continue;
      switch (st) {
        case VALUE:
          if (b === QUOTE) this.#beginString(false);
          else if (b === 0x7b || b === 0x5b) this.#open(b === 0x7b ? OBJECT : ARRAY);
          else if ((b === 0x5d || b === 0x7d) && this.#opened) this.#close(b === 0x7d ? OBJECT : ARRAY);
          else if (scalarByte(b)) this.#beginScalar(b);
          else this.#state = ERROR;
          break;
        case KEY:
          if (b === QUOTE) this.#beginString(true);
          else if (b === 0x7d && this.#opened) this.#close(OBJECT);
          else this.#state = ERROR;
          break;
        case COLON:
          this.#state = b === 0x3a ? VALUE : ERROR;
          break;
        case AFTER:
          if (b === 0x2c) this.#state = this.#kind() === OBJECT ? KEY : VALUE;
          // Past the tracked depth keys are read as values; their colon is let through.
          else if (b === 0x3a && this.#kind() === 0) this.#state = VALUE;
          else if (b === 0x5d || b === 0x7d) this.#close(b === 0x7d ? OBJECT : ARRAY);
          else this.#state = ERROR;
          break;
        default: // DONE: only whitespace may follow the top-level value
          this.#state = ERROR;
      }
    }
  }

  /** The facts of a complete, well-formed answer; null when it was cut or is not JSON. */
  end(): AnswerFacts | null {
    if (this.#state === SCALAR && this.#depth === 0) this.#endScalar();
    if (this.#state !== DONE) return null;
    return {
      pushed: this.#pushed,
      acked: this.#acked,
      delivered: this.#popIsArray ? this.#popCount : 0,
      committed: this.#committed,
      leaseId: this.#leaseId,
    };
  }

  /** Kind of the innermost container, or 0 past the tracked depth. */
  #kind(): number {
    return this.#depth <= TRACKED_DEPTH ? this.#kinds[this.#depth - 1]! : 0;
  }

  /** A value starts at the current depth: counts it when it is an element of `messages`. */
  #valueStarts(): void {
    this.#opened = false;
    if (this.#inMessages && this.#depth === 2) this.#popCount++;
  }

  #open(kind: number): void {
    this.#valueStarts();
    const role = this.#role;
    this.#depth++;
    if (this.#depth <= TRACKED_DEPTH) this.#kinds[this.#depth - 1] = kind;
    if (this.#depth === 2) {
      if (this.#kinds[0] === OBJECT && role === MESSAGES && kind === ARRAY) {
        this.#inMessages = true;
        this.#popIsArray = true;
      } else if (this.#kinds[0] === ARRAY && kind === OBJECT) {
        this.#inItem = true;
        this.#itemAccepted = false;
        this.#itemSuccess = false;
      }
    }
    this.#role = NONE;
    this.#opened = true;
    this.#state = kind === OBJECT ? KEY : VALUE;
  }

  #close(kind: number): void {
    // Past the tracked depth a mismatched closer is not noticed; the depth count stays exact.
    const open = this.#kind();
    if (open !== 0 && open !== kind) {
      this.#state = ERROR;
      return;
    }
    if (this.#depth === 2) {
      if (this.#inItem) {
        if (this.#itemAccepted) this.#pushed++;
        if (this.#itemSuccess) this.#acked++;
      }
      this.#inItem = false;
      this.#inMessages = false;
    }
    this.#depth--;
    this.#opened = false;
    this.#role = NONE;
    this.#state = this.#depth === 0 ? DONE : AFTER;
  }

  /** True where keys, or values of a key, are read: the top-level object and top-level array items. */
  #metered(): boolean {
    return (this.#depth === 1 && this.#kinds[0] === OBJECT) || (this.#depth === 2 && this.#inItem);
  }

  #beginString(isKey: boolean): void {
    if (!isKey) this.#valueStarts();
    this.#opened = false;
    this.#isKey = isKey;
    this.#capturing = isKey ? this.#metered() : this.#role === LEASE_ID || this.#role === STATUS;
    this.#escaped = false;
    this.#hasEscape = false;
    this.#len = 0;
    this.#over = false;
    this.#state = STRING;
  }

  /** Skips to the string's closing quote. */
  #skipString(chunk: Uint8Array, from: number): number {
    // Short strings: a plain loop costs less than a native call.
    const stop = Math.min(chunk.length, from + 32);
    let i = from;
    for (; i < stop; i++) {
      const b = chunk[i]!;
      if (this.#escaped) this.#escaped = false;
      else if (b === BACKSLASH) this.#escaped = true;
      else if (b === QUOTE) {
        this.#endString();
        return i + 1;
      }
    }
    if (i === chunk.length) return i;
    // Long strings: jump from quote to quote; one after an odd run of backslashes is escaped.
    /** Parity of the backslash run that ends right before `i`. */
    let carry = this.#escaped ? 1 : 0;
    for (;;) {
      const q = chunk.indexOf(QUOTE, i);
      const end = q < 0 ? chunk.length : q;
      let k = end - 1;
      while (k >= i && chunk[k] === BACKSLASH) k--;
      const run = end - 1 - k + (k < i ? carry : 0);
      if (q < 0) {
        this.#escaped = (run & 1) === 1;
        return chunk.length;
      }
      carry = 0;
      if ((run & 1) === 0) {
        this.#escaped = false;
        this.#endString();
        return q + 1;
      }
      i = q + 1;
    }
  }

  /** Copies a string that may matter (bounded), to its closing quote. */
  #captureString(chunk: Uint8Array, from: number): number {
    for (let i = from; i < chunk.length; i++) {
      const b = chunk[i]!;
      if (this.#escaped) this.#escaped = false;
      else if (b === BACKSLASH) this.#escaped = this.#hasEscape = true;
      else if (b === QUOTE) {
        this.#endString();
        return i + 1;
      }
      this.#keep(b);
    }
    return chunk.length;
  }

  #keep(b: number): void {
    if (this.#len < CAPTURE_BYTES) this.#buf[this.#len++] = b;
    else this.#over = true;
  }

  /** The captured string, decoded as JSON.parse would; null when it outgrew the buffer. */
  #captured(): string | null {
    if (this.#over) return null;
    const raw = this.#buf.toString('utf8', 0, this.#len);
    if (!this.#hasEscape) return raw;
    try {
      return JSON.parse(`"${raw}"`) as string;
    } catch {
      return null;
    }
  }

  /** The captured bytes equal `s` (escaped strings are decoded first). */
  #equals(s: Buffer): boolean {
    if (this.#over) return false;
    if (!this.#hasEscape) return this.#len === s.length && this.#buf.compare(s, 0, s.length, 0, this.#len) === 0;
    return this.#captured() === s.toString('latin1');
  }

  #endString(): void {
    if (this.#isKey) {
      this.#role = this.#capturing ? this.#keyRole() : NONE;
      this.#state = COLON;
      return;
    }
    if (this.#role === LEASE_ID) this.#leaseId = this.#captured();
    else if (this.#role === STATUS) this.#itemAccepted = ACCEPTED_STATUSES.some((s) => this.#equals(s));
    this.#role = NONE;
    this.#state = this.#depth === 0 ? DONE : AFTER;
  }

  /** The role of the key just read; resets the fact it names (the last duplicate key wins). */
  #keyRole(): number {
    // Every key compared is 6 to 8 bytes; an escaped one may be longer.
    if (!this.#hasEscape && (this.#len < 6 || this.#len > 8)) return NONE;
    const top = this.#depth === 1;
    for (const [name, atTop, inItem] of KEY_NAMES) {
      const role = top ? atTop : inItem;
      if (role === NONE || !this.#equals(name)) continue;
      if (role === MESSAGES) {
        this.#popIsArray = false;
        this.#popCount = 0;
      } else if (role === LEASE_ID) this.#leaseId = null;
      else if (role === TOP_SUCCESS) this.#committed = false;
      else if (role === STATUS) this.#itemAccepted = false;
      else this.#itemSuccess = false;
      return role;
    }
    return NONE;
  }

  #beginScalar(b: number): void {
    this.#valueStarts();
    this.#len = 0;
    this.#over = false;
    this.#hasEscape = false;
    this.#keep(b);
    this.#state = SCALAR;
  }

  #endScalar(): void {
    const first = this.#buf[0]!;
    const letter = first >= 0x61 && first <= 0x7a;
    if ((letter && !LITERALS.some((l) => this.#equals(l))) || (!letter && !((first >= 0x30 && first <= 0x39) || first === 0x2d))) {
      this.#state = ERROR;
      return;
    }
    if (this.#role === TOP_SUCCESS) this.#committed = this.#equals(TRUE);
    else if (this.#role === ITEM_SUCCESS) this.#itemSuccess = this.#equals(TRUE);
    this.#role = NONE;
    this.#state = this.#depth === 0 ? DONE : AFTER;
  }
}
