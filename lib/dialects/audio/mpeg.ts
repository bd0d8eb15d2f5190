// MPEG audio (MP3; Layers I and II too) measured by its frames: each frame header says its
// version, layer, bitrate and rate, so its length and its samples (384, 1152, or 576 for
// Layer III below 32 kHz). A Xing, Info or VBRI header is not trusted over the frames: the
// frames are counted, and the frame that carries such a header (the first, as decoders read
// it) is the only one left out, being silence. A header counts when it continues the stream
// (same version, layer and rate) or starts a run of its own (one like it follows where its
// length says), so a stray 0xFF in a cover picture or in garbage is not taken for a frame. A
// frame's length is trusted only when another frame (or the end) follows where it says;
// otherwise the search for the next header goes on from inside it, so garbage, a tag at the end
// or a forged length never hides frames. A last frame cut short is counted whole. A
// free-format frame (no bitrate in its header) runs to the next header the search finds.

import { Tally, type Walk, YIELD_WORK } from './walk.js';

export interface MpegHeader {
  version: 1 | 2 | 25;
  layer: 1 | 2 | 3;
  rate: number;
  samples: number;
  /** 0 for a free-format frame (no bitrate): its length is up to the next header. */
  length: number;
  mono: boolean;
  crc: boolean;
}

/** kbit/s by bitrate index: MPEG-1 Layers I, II, III, then MPEG-2 and 2.5 Layers I, II, III. */
const BITRATES: readonly (readonly number[])[] = [
  [0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
  [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
  [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320],
  [0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
  [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
  [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
];
const RATES = [44100, 48000, 32000];

/** The frame header at `p`, if four bytes there are one (free format and reserved values are not). */
export function mpegHeader(b: Uint8Array, p: number): MpegHeader | undefined {
  if (p + 4 > b.length || b[p] !== 0xff) return undefined;
  const b1 = b[p + 1]!, b2 = b[p + 2]!, b3 = b[p + 3]!;
  if ((b1 & 0xe0) !== 0xe0) return undefined;
  const v = (b1 >> 3) & 3;
  const l = (b1 >> 1) & 3;
  const bri = b2 >> 4;
  const sri = (b2 >> 2) & 3;
  if (v === 1 || l === 0 || bri === 15 || sri === 3) return undefined;
  const version = v === 3 ? 1 : v === 2 ? 2 : 25;
  const layer = (4 - l) as 1 | 2 | 3;
  const kbps = BITRATES[(version === 1 ? 0 : 3) + layer - 1]![bri]!;
  const rate = RATES[sri]! / (version === 1 ? 1 : version === 2 ? 2 : 4);
  const pad = (b2 >> 1) & 1;
  let length: number;
  let samples: number;
  if (layer === 1) {
    samples = 384;
    length = (Math.floor((12 * kbps * 1000) / rate) + pad) * 4;
  } else {
    samples = layer === 3 && version !== 1 ? 576 : 1152;
    length = Math.floor(((samples / 8) * kbps * 1000) / rate) + pad;
  }
  if (kbps === 0) length = 0;
  return { version, layer, rate, samples, length, mono: b3 >> 6 === 3, crc: (b1 & 1) === 0 };
}

function same(a: MpegHeader, b: MpegHeader): boolean {
  return a.version === b.version && a.layer === b.layer && a.rate === b.rate;
}

/** A Layer III frame that holds a Xing, Info or VBRI header rather than audio. */
function isInfoFrame(b: Uint8Array, p: number, h: MpegHeader): boolean {
  if (h.layer !== 3) return false;
  const side = h.version === 1 ? (h.mono ? 17 : 32) : (h.mono ? 9 : 17);
  const at = p + 4 + (h.crc ? 2 : 0) + side;
  const tag = (q: number) => String.fromCharCode(b[q] ?? 0, b[q + 1] ?? 0, b[q + 2] ?? 0, b[q + 3] ?? 0);
  const t = tag(at);
  return t === 'Xing' || t === 'Info' || tag(p + 36) === 'VBRI';
}

/** A header at `p` with another one where its length says (or the end within that length). */
export function mpegStartsAt(b: Uint8Array, p: number, end = b.length): boolean {
  const h = mpegHeader(b, p);
  if (h === undefined) return false;
  const at = h.length > 0 ? p + h.length : nextSync(b, p + 4, end);
  if (at >= end) return true;
  const next = mpegHeader(b, at);
  return next !== undefined && same(h, next);
}

/** The next position after `p` where a frame header could start (0xFF then three set bits). */
function nextSync(b: Uint8Array, p: number, end: number): number {
  for (let i = p; i + 1 < end; i++) {
    i = b.indexOf(0xff, i);
    if (i === -1 || i + 1 >= end) return end;
    if ((b[i + 1]! & 0xe0) === 0xe0) return i;
  }
  return end;
}

/**
 * Counts the frames in b[start, end) into `tally`; returns how many were counted. `skipInfo`:
 * the first frame may be a Xing/Info/VBRI header (an MP3 file; not a block of a container).
 */
export function* walkMpeg(b: Uint8Array, start: number, end: number, tally: Tally, skipInfo: boolean): Walk<number> {
  let work = 0;
  let p = start;
  let last: MpegHeader | undefined;
  let frames = 0;
  /** A header at `q` that continues `ref`, or starts a run of its own (another like it follows). */
  const frameAt = (q: number, ref: MpegHeader | undefined): MpegHeader | undefined => {
    const h = mpegHeader(b, q);
    if (h === undefined || ref === undefined || same(h, ref)) return h;
    const after = mpegHeader(b, h.length > 0 ? q + h.length : nextSync(b, q + 4, end));
    return after !== undefined && same(h, after) ? h : undefined;
  };
  while (p + 4 <= end) {
    const h = frameAt(p, last);
    if (h === undefined) {
      const q = nextSync(b, p + 1, end);
      if ((work += q - p + 1) >= YIELD_WORK) {
        yield work;
        work = 0;
      }
      p = q;
      continue;
    }
    if (!(skipInfo && frames === 0 && isInfoFrame(b, p, h))) tally.add(h.samples, h.rate);
    frames++;
    last = h;
    // A frame's length is trusted when another frame (or the end) is where it says; otherwise
    // the search goes on inside it, so that no frame can swallow the frames after it.
    // A free-format frame runs to the next header, wherever the search finds it.
    const next = p + h.length;
    const q = h.length > 0 && (next >= end || frameAt(next, h) !== undefined) ? next : nextSync(b, p + (h.length > 0 ? 1 : 4), end);
    if ((work += q - p + 1) >= YIELD_WORK) {
      yield work;
      work = 0;
    }
    p = q;
  }
  return frames;
}
