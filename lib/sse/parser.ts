// Server-sent events parser (WHATWG rules): events split across TCP packets, LF, CRLF and CR
// line endings, comments, multi-line data, and UTF-8 characters split between packets.

export interface SseEvent {
  event: string | undefined;
  data: string;
}

const LINE_BREAK = /\r\n|\r|\n/g;

export class SseParser {
  #decoder = new TextDecoder('utf-8');
  #pending = '';
  #data: string[] = [];
  #event: string | undefined = undefined;
  /** Comment lines seen so far (upstream keep-alives). */
  comments = 0;

  /** Feeds bytes; returns the events they complete. */
  push(chunk: Uint8Array): SseEvent[] {
    return this.#lines(this.#pending + this.#decoder.decode(chunk, { stream: true }), false);
  }

  /** The body ended: returns a last event that lacked its blank line, if any. */
  end(): SseEvent[] {
    const rest = this.#pending + this.#decoder.decode();
    const out = this.#lines(rest, true);
    this.#pending = '';
    const last = this.#dispatch();
    if (last !== undefined) out.push(last);
    return out;
  }

  #lines(text: string, final: boolean): SseEvent[] {
    const out: SseEvent[] = [];
    let start = 0;
    LINE_BREAK.lastIndex = 0;
    for (let m = LINE_BREAK.exec(text); m !== null; m = LINE_BREAK.exec(text)) {
      // A CR at the very end may be the first half of a CRLF split across packets.
      if (!final && m[0] === '\r' && m.index === text.length - 1) break;
      const ev = this.#line(text.slice(start, m.index));
      if (ev !== undefined) out.push(ev);
      start = m.index + m[0].length;
    }
    this.#pending = text.slice(start);
    if (final && this.#pending !== '') {
      const ev = this.#line(this.#pending);
      if (ev !== undefined) out.push(ev);
      this.#pending = '';
    }
    return out;
  }

  #line(line: string): SseEvent | undefined {
    if (line === '') return this.#dispatch();
    if (line.charCodeAt(0) === 58 /* : */) {
      this.comments++;
      return undefined;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32 /* space */) value = value.slice(1);
    if (field === 'data') this.#data.push(value);
    else if (field === 'event') this.#event = value;
    return undefined;
  }

  #dispatch(): SseEvent | undefined {
    if (this.#data.length === 0) {
      this.#event = undefined;
      return undefined;
    }
    const ev = { event: this.#event, data: this.#data.length === 1 ? this.#data[0]! : this.#data.join('\n') };
    this.#data = [];
    this.#event = undefined;
    return ev;
  }
}
