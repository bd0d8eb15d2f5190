// What every audio frame walker shares: the tally of samples by rate (integers, so that a
// file of exactly ten seconds is ten seconds, not 10.000000001), the refusal of a file whose
// frames cannot be read, and the driver that runs a walker in slices. A walker is a
// generator that yields the work it did (bytes, roughly) every YIELD_WORK of it; the driver
// hands the event loop back every few milliseconds, so that measuring a 25 MiB body never
// holds /healthz (CONTRACT §16, §21).

import { badValue } from '../../hub/params.js';
import type { GatewayError } from '../../errors.js';

/** A walker: yields work done (about a byte a unit), returns its result. */
export type Walk<T> = Generator<number, T, void>;

/** The highest sample rate read (Hz): above it a header is not a real recording's. */
export const MAX_RATE = 768_000;

/** Opus decodes at 48 kHz whatever the input was; one packet holds at most 120 ms. */
export const OPUS_RATE = 48_000;
export const OPUS_MAX_PACKET_SAMPLES = 5760;

/** The longest the driver runs a walker before it yields the event loop (ms). */
const SLICE_MS = 4;
/**
 * Work a walker does between two yields, and so between two looks at the clock: each yield
 * costs an allocation and each look about as much as 100 bytes of walking.
 */
export const YIELD_WORK = 16 * 1024;

export function unreadable(why: string): GatewayError {
  return badValue('file', `could not read the audio's length (${why}); send WAV, MP3, FLAC, OGG or WebM`);
}

/** Samples counted by rate: what one stream (a track, a logical bitstream) holds. */
export class Tally {
  readonly #byRate = new Map<number, number>();
  /** The rate of the frames just counted and their samples not yet in the map (a frame at a time is hot). */
  #rate = 0;
  #pending = 0;

  add(samples: number, rate: number): void {
    if (samples <= 0) return;
    if (rate !== this.#rate) this.#flush(rate);
    this.#pending += samples;
  }

  #flush(next: number): void {
    if (this.#pending > 0) this.#byRate.set(this.#rate, (this.#byRate.get(this.#rate) ?? 0) + this.#pending);
    this.#rate = next;
    this.#pending = 0;
  }

  /** Takes `samples` off at `rate` (a codec's delay), never below nothing. */
  trim(samples: number, rate: number): void {
    this.#flush(0);
    const have = this.#byRate.get(rate);
    if (have !== undefined) this.#byRate.set(rate, Math.max(0, have - samples));
  }

  get seconds(): number {
    this.#flush(0);
    let s = 0;
    for (const [rate, n] of this.#byRate) s += n / rate;
    return s;
  }
}

/** Runs a walker to its end, yielding the event loop between slices of at most SLICE_MS. */
export async function drive<T>(walk: Walk<T>): Promise<T> {
  let sliceStart = performance.now();
  let work = 0;
  for (;;) {
    const step = walk.next();
    if (step.done === true) return step.value;
    work += step.value;
    if (work < YIELD_WORK) continue;
    work = 0;
    if (performance.now() - sliceStart < SLICE_MS) continue;
    await new Promise<void>((resolve) => setImmediate(resolve));
    sliceStart = performance.now();
  }
}

/** Where the ID3v2 tags at `p` end (each `ID3` header says its size); `p` when there are none. */
export function skipId3v2(b: Buffer, p: number): number {
  while (p + 10 <= b.length && b[p] === 0x49 && b[p + 1] === 0x44 && b[p + 2] === 0x33) {
    const s6 = b[p + 6]!, s7 = b[p + 7]!, s8 = b[p + 8]!, s9 = b[p + 9]!;
    if ((s6 | s7 | s8 | s9) & 0x80) break; // not a syncsafe size: not a tag
    const size = (s6 << 21) | (s7 << 14) | (s8 << 7) | s9;
    const footer = (b[p + 5]! & 0x10) !== 0 ? 10 : 0;
    p = Math.min(b.length, p + 10 + size + footer);
  }
  return p;
}

/** Runs a walker to its end at once: for a small piece (one block of a container). */
export function runSync<T>(walk: Walk<T>): T {
  for (;;) {
    const step = walk.next();
    if (step.done === true) return step.value;
  }
}
