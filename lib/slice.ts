// Work over a request's many pieces (texts counted, results rendered) in slices: the event loop
// is given back every few milliseconds, however many pieces there are (CONTRACT sections 16 and
// 21: no request holds the loop; /healthz answers within 100 ms while a 20 MB body is handled).

/** A job gives the event loop back after this long (a few ms at most). */
export const SLICE_MS = 2;
/** The clock is read once per this many units of work (characters, by default). */
const CHECK_EVERY = 8192;

/**
 * The time a job may still take before it gives the event loop back; one per job (a request's
 * prompt, its documents, its answer), so that its many pieces share it.
 */
export class Slice {
  #until = performance.now() + SLICE_MS;
  /** Work done since the clock was last read: it is read once per CHECK_EVERY of it. */
  #done = 0;

  /** Undefined while time is left (`work` more was just done), else resolves after other work had its turn. */
  pause(work: number): Promise<void> | undefined {
    this.#done += work;
    if (this.#done < CHECK_EVERY) return undefined;
    this.#done = 0;
    if (performance.now() < this.#until) return undefined;
    return new Promise<void>((resolve) => setImmediate(() => {
      this.#until = performance.now() + SLICE_MS;
      resolve();
    }));
  }
}

/** Characters of JSON text encoded to bytes at a time (encodeSliced, joinSlicedBytes). */
const ENCODE_CHARS = 64 * 1024;

/**
 * `head`, then `items` rendered one by one (`render` returns a JSON text) and joined with
 * commas, then `tail`, as UTF-8 bytes encoded as they are made, in slices: an answer of tens of
 * MB of JSON written as one string would be encoded at once when written (see encodeSliced).
 */
export async function joinSlicedBytes<T>(head: string, items: readonly T[], render: (item: T, index: number) => string, tail: string, slice = new Slice()): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  let pending = head;
  for (let i = 0; i < items.length; i++) {
    const part = render(items[i]!, i);
    pending += i === 0 ? part : `,${part}`;
    if (pending.length >= ENCODE_CHARS) {
      const bytes = Buffer.from(pending, 'utf8');
      chunks.push(bytes);
      size += bytes.length;
      pending = '';
    }
    const pause = slice.pause(part.length);
    if (pause !== undefined) await pause;
  }
  const last = Buffer.from(pending + tail, 'utf8');
  if (chunks.length === 0) return last;
  chunks.push(last);
  return Buffer.concat(chunks, size + last.length);
}

/**
 * JSON.stringify of a JSON object (a request body as parsed, with fields set on it) as its UTF-8
 * bytes, its top-level lists rendered item by item and the text encoded as it is made, in
 * slices: a body of 2,048 texts (20 MB) sent upstream is made in steps, not at once. The same
 * bytes as Buffer.from(JSON.stringify(obj)). Bytes, not a string: a 20 MB string handed to a
 * socket is encoded there in one go (over 100 ms of a slow core, the event loop held).
 */
export async function encodeSliced(obj: Record<string, unknown>, slice = new Slice()): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  let pending = '{';
  const flush = (): void => {
    const bytes = Buffer.from(pending, 'utf8');
    chunks.push(bytes);
    size += bytes.length;
    pending = '';
  };
  let first = true;
  for (const [key, value] of Object.entries(obj)) {
    if (value === undefined || typeof value === 'function' || typeof value === 'symbol') continue;
    pending += `${first ? '' : ','}${JSON.stringify(key)}:`;
    first = false;
    if (Array.isArray(value)) {
      pending += '[';
      for (let i = 0; i < value.length; i++) {
        const part = JSON.stringify(value[i]) ?? 'null';
        pending += i === 0 ? part : `,${part}`;
        if (pending.length >= ENCODE_CHARS) flush();
        const pause = slice.pause(part.length);
        if (pause !== undefined) await pause;
      }
      pending += ']';
    } else {
      pending += JSON.stringify(value);
    }
    if (pending.length >= ENCODE_CHARS) flush();
  }
  pending += '}';
  flush();
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
}
