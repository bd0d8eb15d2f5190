// Native FLAC measured by its frames, as a decoder reads it: the `fLaC` marker (after any
// ID3v2 tags), the metadata blocks skipped by their lengths (STREAMINFO's rate and sample size
// kept, for frame headers that refer to them), then frame after frame, each read through its
// subframes to where the next must begin (flac-frame.ts). STREAMINFO's total samples is never
// used: the frames are the length. Bytes that are not a frame (garbage, a frame whose subframes
// cannot be read) are searched through for the next sync code whose header's CRC-8 holds, as
// decoders resynchronise; a frame the file ends inside is counted whole. A frame that holds
// other frames' headers in its data is charged for them (see hidden()). Reading through false
// syncs is bounded: more undecodable bytes than twice the file's is refused rather than walked.

import { flacFrameEnd, flacHeader, type FlacHeader, type FlacInfo } from './flac-frame.js';
import { MAX_RATE, Tally, unreadable, type Walk, YIELD_WORK } from './walk.js';

/** STREAMINFO's rate and sample size from its 34 bytes at `p` (rate 0 when it names none). */
export function streamInfo(b: Uint8Array, p: number): FlacInfo {
  const rate = ((b[p + 10]! << 12) | (b[p + 11]! << 4) | (b[p + 12]! >> 4)) >>> 0;
  const bps = (((b[p + 12]! & 1) << 4) | (b[p + 13]! >> 4)) + 1;
  return { rate: rate <= MAX_RATE ? rate : 0, bps };
}

/** Where the metadata blocks starting at `p` end, and STREAMINFO's fields. */
function metadata(b: Buffer, p: number): { end: number; info: FlacInfo } {
  let info: FlacInfo | undefined;
  for (;;) {
    if (p + 4 > b.length) throw unreadable('FLAC metadata cut short');
    const last = (b[p]! & 0x80) !== 0;
    const type = b[p]! & 0x7f;
    const length = (b[p + 1]! << 16) | (b[p + 2]! << 8) | b[p + 3]!;
    if (info === undefined) {
      if (type !== 0 || length < 34 || p + 4 + 34 > b.length) throw unreadable('a FLAC file without its STREAMINFO');
      info = streamInfo(b, p + 4);
    }
    p += 4 + length;
    if (p > b.length) throw unreadable('a FLAC metadata block runs past the end of the file');
    if (last) return { end: p, info };
  }
}

/** The next sync code (0xFF, then 0xF8 or 0xF9) at or after `p`; the end when none. */
function nextSync(b: Buffer, p: number): number {
  for (;;) {
    const i = b.indexOf(0xff, p);
    if (i === -1 || i + 1 >= b.length) return b.length;
    if ((b[i + 1]! & 0xfe) === 0xf8) return i;
    p = i + 1;
  }
}

/**
 * The samples of the frame headers inside the frame b[p, end) that match it (rate, channels,
 * sample size): a decoder that finds frames by their headers (ffmpeg's) rather than by reading
 * through them would play those, so a frame cannot hide frames inside its data. An honest frame
 * holds none but by a chance of about one in 10^10 a byte (a sync code, reserved bits, these
 * codes and a CRC-8 all matching).
 */
const INNER: FlacHeader = { size: 0, blockSize: 0, rate: 0, channels: 0, assignment: 0, bps: 0 };

function hidden(b: Buffer, p: number, end: number, h: FlacHeader, info: FlacInfo): number {
  let samples = 0;
  for (let q = p + h.size; ;) {
    const i = b.indexOf(0xff, q);
    if (i === -1 || i >= end - 2) return samples;
    const inner = (b[i + 1]! & 0xfe) === 0xf8 ? flacHeader(b, i, info, INNER) : undefined;
    if (inner !== undefined && inner.rate === h.rate && inner.channels === h.channels && inner.bps === h.bps) {
      samples += inner.blockSize;
      q = i + inner.size + inner.channels;
    } else q = i + 1;
  }
}

/**
 * The frames one after another in a container's packet or block `data` (one, as muxers write
 * them; more, as a decoder given more would play them), into `tally`.
 */
export function countFlacFrames(data: Uint8Array, info: FlacInfo, tally: Tally): void {
  for (let p = 0; p < data.length;) {
    const h = flacHeader(data, p, info);
    if (h === undefined) return;
    tally.add(h.blockSize, h.rate);
    const f = flacFrameEnd(data, p, h);
    if (f.state !== 'ok') return;
    p = f.end;
  }
}

/** The FLAC stream whose `fLaC` marker is at `start`. */
export function* walkFlac(b: Buffer, start: number): Walk<Tally> {
  let work = 0;
  if (b.length >= 2 ** 29) throw unreadable('a FLAC file of 512 MiB or more');
  const { end, info } = metadata(b, start + 4);
  const tally = new Tally();
  const budget = 2 * b.length + 1024 * 1024;
  let wasted = 0;
  let p = end;
  const header = { size: 0, blockSize: 0, rate: 0, channels: 0, assignment: 0, bps: 0 };
  while (p < b.length) {
    const h = flacHeader(b, p, info, header);
    if (h !== undefined) {
      const f = flacFrameEnd(b, p, h);
      if (f.state === 'ok') {
        tally.add(Math.max(h.blockSize, hidden(b, p, f.end, h, info)), h.rate);
        if ((work += f.end - p + 1) >= YIELD_WORK) {
          yield work;
          work = 0;
        }
        p = f.end;
        continue;
      }
      // A frame the file ends inside is counted whole; and a header whose frame runs to the end
      // may be a false one, with frames after it that a decoder would find: search on.
      if (f.state === 'cut') tally.add(h.blockSize, h.rate);
      // What was read to find either is work not to repeat without bound.
      wasted += f.work + h.size;
      if (wasted > budget) throw unreadable('too many bytes that are not FLAC frames');
    }
    const q = nextSync(b, p + 1);
    if ((work += q - p + 1) >= YIELD_WORK) {
      yield work;
      work = 0;
    }
    p = q;
  }
  return tally;
}
