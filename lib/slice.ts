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

/**
 * `items` rendered one by one (`render` returns a JSON text) and joined with commas: a JSON
 * list's inside, made in slices (an item's work: its rendered length).
 */
export async function joinSliced<T>(items: readonly T[], render: (item: T, index: number) => string, slice = new Slice()): Promise<string> {
  const parts = new Array<string>(items.length);
  for (let i = 0; i < items.length; i++) {
    const part = render(items[i]!, i);
    parts[i] = part;
    const pause = slice.pause(part.length);
    if (pause !== undefined) await pause;
  }
  return parts.join(',');
}

/**
 * JSON.stringify of a JSON object (a request body as parsed, with fields set on it), its
 * top-level lists rendered item by item in slices: a body of 2,048 texts (20 MB) sent upstream
 * is made in steps, not at once. The same text as JSON.stringify gives.
 */
export async function stringifySliced(obj: Record<string, unknown>, slice = new Slice()): Promise<string> {
  const members: string[] = [];
  for (const [key, value] of Object.entries(obj)) {
    if (value === undefined || typeof value === 'function' || typeof value === 'symbol') continue;
    const text = Array.isArray(value) ? `[${await joinSliced(value, (x) => JSON.stringify(x) ?? 'null', slice)}]` : JSON.stringify(value);
    members.push(`${JSON.stringify(key)}:${text}`);
  }
  return `{${members.join(',')}}`;
}
