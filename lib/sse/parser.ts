// Server-sent events parser (WHATWG rules): events split across TCP packets, LF, CRLF and CR
// line endings, comments, multi-line data, a leading BOM, and UTF-8 characters split between
// packets. Linear in the bytes received: each byte is searched once (line breaks are found
// with native byte searches, never by re-scanning what an earlier packet left over), and a
// line split across packets is kept as a list of pieces, joined once when it ends. A line or
// an event's data above `maxLineBytes` throws SseLimitError, so an upstream cannot make the
// gateway buffer without bound.

export interface SseEvent {
  event: string | undefined;
  data: string;
}

/** The most bytes a line, or an event's accumulated data, may hold (CONTRACT section 10). */
export const MAX_SSE_LINE_BYTES = 1024 * 1024;

/** A line or an event's data went past the parser's limit. */
export class SseLimitError extends Error {
  constructor(readonly limit: number, what: 'line' | 'event') {
    super(`an SSE ${what} exceeds ${limit} bytes`);
    this.name = 'SseLimitError';
  }
}

const LF = 0x0a;
const CR = 0x0d;
const BOM = [0xef, 0xbb, 0xbf] as const;

export class SseParser {
  // CR and LF bytes never occur inside a multi-byte UTF-8 sequence, so lines are split on
  // bytes and each whole line decoded once (Buffer's decoder replaces invalid sequences as
  // TextDecoder does, and keeps a BOM: only the stream's first one is dropped, by #skipBom).
  readonly #max: number;
  /** The current line's bytes from earlier packets, not yet ended by a line break. */
  #pending: Buffer[] = [];
  #pendingBytes = 0;
  /** The last packet ended in CR: a line ended there, unless the next byte is its LF. */
  #crPending = false;
  /** Bytes of a possible leading BOM seen so far; null once the stream's start is past. */
  #head: number[] | null = [];
  #data: string[] = [];
  #dataBytes = 0;
  #event: string | undefined = undefined;
  /** Comment lines seen so far (upstream keep-alives). */
  comments = 0;
  /** Bytes the line-break searches and line copies went over: the parser's work, for tests. */
  work = 0;

  constructor(maxLineBytes: number = MAX_SSE_LINE_BYTES) {
    this.#max = maxLineBytes;
  }

  /** Feeds bytes; returns the events they complete. Throws SseLimitError past the limit. */
  push(chunk: Uint8Array): SseEvent[] {
    const out: SseEvent[] = [];
    const bytes = this.#head === null ? chunk : this.#skipBom(chunk);
    if (bytes.length > 0) {
      this.#scan(Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), out);
    }
    return out;
  }

  /** The body ended: returns a last event that lacked its blank line, if any. */
  end(): SseEvent[] {
    const out: SseEvent[] = [];
    if (this.#head !== null && this.#head.length > 0) {
      // A stream shorter than a BOM: what looked like its start is content.
      const head = Buffer.from(this.#head);
      this.#head = null;
      this.#scan(head, out);
    }
    this.#head = null;
    if (this.#crPending) {
      // At the end of the body a trailing CR is a line break.
      this.#crPending = false;
      this.#endLine(undefined, 0, 0, out);
    }
    if (this.#pendingBytes > 0 || this.#pending.length > 0) this.#endLine(undefined, 0, 0, out);
    const last = this.#dispatch();
    if (last !== undefined) out.push(last);
    return out;
  }

  /** Holds back the stream's first bytes until it is known whether they are a BOM. */
  #skipBom(chunk: Uint8Array): Uint8Array {
    const head = this.#head!;
    if (head.length === 0 && chunk.length >= 3) {
      this.#head = null;
      return chunk[0] === BOM[0] && chunk[1] === BOM[1] && chunk[2] === BOM[2] ? chunk.subarray(3) : chunk;
    }
    let i = 0;
    while (head.length < 3 && i < chunk.length) head.push(chunk[i++]!);
    if (head.length < 3) return new Uint8Array(0);
    this.#head = null;
    const rest = chunk.subarray(i);
    if (head[0] === BOM[0] && head[1] === BOM[1] && head[2] === BOM[2]) return rest;
    const joined = new Uint8Array(3 + rest.length);
    joined.set(head);
    joined.set(rest, 3);
    return joined;
  }

  #scan(buf: Buffer, out: SseEvent[]): void {
    let pos = 0;
    if (this.#crPending) {
      this.#crPending = false;
      this.#endLine(undefined, 0, 0, out);
      if (buf[0] === LF) pos = 1;
    }
    // The next LF and CR at or after `pos`, each searched for again only once passed: a packet
    // of many LF lines does not make the CR search re-scan the packet's rest for every line.
    let nextLf = -2;
    let nextCr = -2;
    while (pos < buf.length) {
      if (nextLf !== -1 && nextLf < pos) nextLf = this.#find(buf, LF, pos);
      if (nextCr !== -1 && nextCr < pos) nextCr = this.#find(buf, CR, pos);
      const at = nextLf === -1 ? nextCr : nextCr === -1 ? nextLf : Math.min(nextLf, nextCr);
      if (at === -1) {
        this.#keep(buf, pos, buf.length);
        return;
      }
      if (buf[at] === CR) {
        if (at === buf.length - 1) {
          // A CR at the very end may be the first half of a CRLF split across packets.
          this.#keep(buf, pos, at);
          this.#crPending = true;
          return;
        }
        this.#endLine(buf, pos, at, out);
        pos = buf[at + 1] === LF ? at + 2 : at + 1;
      } else {
        this.#endLine(buf, pos, at, out);
        pos = at + 1;
      }
    }
  }

  #find(buf: Buffer, byte: number, from: number): number {
    const at = buf.indexOf(byte, from);
    this.work += (at === -1 ? buf.length : at + 1) - from;
    return at;
  }

  /** Keeps an unfinished line's bytes for the next packet, within the limit. */
  #keep(buf: Buffer, start: number, end: number): void {
    if (end === start) return;
    this.#pendingBytes += end - start;
    if (this.#pendingBytes > this.#max) throw new SseLimitError(this.#max, 'line');
    this.#pending.push(buf.subarray(start, end));
  }

  /** A line ended: the pending pieces, then buf[start, end). */
  #endLine(buf: Buffer | undefined, start: number, end: number, out: SseEvent[]): void {
    const size = this.#pendingBytes + (end - start);
    if (size > this.#max) throw new SseLimitError(this.#max, 'line');
    this.work += size;
    let ev: SseEvent | undefined;
    if (this.#pending.length === 0) {
      ev = buf === undefined ? this.#dispatch() : this.#line(buf, start, end);
    } else {
      if (buf !== undefined && end > start) this.#pending.push(buf.subarray(start, end));
      const line = Buffer.concat(this.#pending, size);
      this.#pending = [];
      this.#pendingBytes = 0;
      ev = this.#line(line, 0, size);
    }
    if (ev !== undefined) out.push(ev);
  }

  #line(buf: Buffer, start: number, end: number): SseEvent | undefined {
    if (end === start) return this.#dispatch();
    if (buf[start] === 58 /* : */) {
      this.comments++;
      return undefined;
    }
    const line = buf.toString('utf8', start, end);
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32 /* space */) value = value.slice(1);
    if (field === 'data') {
      // "data:" is ASCII, so the value's bytes are the line's minus the field and separator.
      this.#dataBytes += end - start - (line.length - value.length) + (this.#data.length > 0 ? 1 : 0);
      if (this.#dataBytes > this.#max) throw new SseLimitError(this.#max, 'event');
      this.#data.push(value);
    } else if (field === 'event') {
      this.#event = value;
    }
    return undefined;
  }

  #dispatch(): SseEvent | undefined {
    if (this.#data.length === 0) {
      this.#event = undefined;
      return undefined;
    }
    const ev = { event: this.#event, data: this.#data.length === 1 ? this.#data[0]! : this.#data.join('\n') };
    this.#data = [];
    this.#dataBytes = 0;
    this.#event = undefined;
    return ev;
  }
}
