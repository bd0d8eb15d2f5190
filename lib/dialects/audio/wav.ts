// WAV (RIFF, RF64, BW64) measured by the audio that is actually there: the data chunks' bytes
// over the bytes a sample frame takes (channels × the sample's bytes; the header's byte rate
// and block align are not used for PCM), at the fmt chunk's rate. The RIFF size is not used. A
// data chunk size that lies either way is not taken: one past the file's end (or 0, or
// 0xFFFFFFFF, as streaming writers leave it) counts the bytes to the end; one that stops short
// of the end counts to the end too, unless what follows it is a well-formed chain of chunks
// (LIST, id3, another data) to the end of the file. Encodings read: PCM, IEEE float, A-law and
// µ-law (also as WAVE_FORMAT_EXTENSIBLE), Microsoft and IMA ADPCM (samples per block as their
// decoders compute them from the block size), MPEG audio (its frames, mpeg.ts); others refused.

import { walkMpeg } from './mpeg.js';
import { MAX_RATE, Tally, unreadable, type Walk, YIELD_WORK } from './walk.js';

interface Fmt { code: number; channels: number; rate: number; blockAlign: number; bits: number; }

function fmtChunk(b: Buffer, p: number, size: number): Fmt {
  if (size < 16 || p + 16 > b.length) throw unreadable('a WAV fmt chunk cut short');
  let code = b.readUInt16LE(p);
  if (code === 0xfffe && size >= 40 && p + 26 <= b.length) code = b.readUInt16LE(p + 24);
  return { code, channels: b.readUInt16LE(p + 2), rate: b.readUInt32LE(p + 4), blockAlign: b.readUInt16LE(p + 12), bits: b.readUInt16LE(p + 14) };
}

const printable = (b: Buffer, p: number) => {
  for (let i = 0; i < 4; i++) if (b[p + i]! < 0x20 || b[p + i]! > 0x7e) return false;
  return true;
};

/** Whether b[q, end) is a chain of well-formed chunks to the end (trailing zero padding allowed). */
function chunksToEnd(b: Buffer, q: number): boolean {
  while (q + 8 <= b.length) {
    if (!printable(b, q)) return false;
    const size = b.readUInt32LE(q + 4);
    q += 8 + size + (size & 1);
    if (q > b.length + 1) return false;
  }
  for (; q < b.length; q++) if (b[q] !== 0) return false;
  return true;
}

/** Samples in `bytes` of ADPCM in blocks of `align` bytes, each with `head` bytes a channel of header holding `first` samples. */
function adpcm(bytes: number, align: number, channels: number, head: number, first: number): number {
  const perBlock = (n: number) => (n < head * channels ? 0 : first + Math.floor(((n - head * channels) * 2) / channels));
  return Math.floor(bytes / align) * perBlock(align) + perBlock(bytes % align);
}

/** The WAV file (RIFF, RF64 or BW64 form of type WAVE): its length in seconds. */
export function* walkWav(b: Buffer): Walk<number> {
  let work = 0;
  let fmt: Fmt | undefined;
  let ds64: number | undefined;
  const data: Array<[number, number]> = [];
  let p = 12;
  while (p + 8 <= b.length) {
    const id = b.toString('latin1', p, p + 4);
    const size = b.readUInt32LE(p + 4);
    const start = p + 8;
    if (id === 'data') {
      const declared = size === 0xffffffff && ds64 !== undefined ? ds64 : size;
      const after = start + declared + (declared % 2);
      if (declared === 0 || declared === 0xffffffff || after >= b.length || !chunksToEnd(b, after)) {
        data.push([start, b.length]);
        break;
      }
      data.push([start, start + declared]);
      p = after;
    } else {
      if (id === 'fmt ') fmt ??= fmtChunk(b, start, size); // the first, as decoders read it
      else if (id === 'ds64' && size >= 16 && start + 16 <= b.length) ds64 = b.readUInt32LE(start + 8) + b.readUInt32LE(start + 12) * 2 ** 32;
      p = start + size + (size & 1);
    }
    if ((work += 9) >= YIELD_WORK) {
      yield work;
      work = 0;
    }
  }
  if (fmt === undefined) throw unreadable('a WAV file without its fmt chunk');
  if (data.length === 0) throw unreadable('a WAV file without its data chunk');
  const { code, channels, rate } = fmt;
  if (code === 0x55 || code === 0x50) {
    const tally = new Tally();
    for (const [from, to] of data) yield* walkMpeg(b.subarray(from, to), 0, to - from, tally, false);
    return tally.seconds;
  }
  if (channels === 0) throw unreadable('a WAV file of no channels');
  if (rate === 0 || rate > MAX_RATE) throw unreadable(`a WAV sample rate of ${rate} Hz`);
  const bytes = data.reduce((n, [from, to]) => n + (to - from), 0);
  let samples: number;
  if (code === 1 || code === 3 || code === 6 || code === 7) {
    if (fmt.bits === 0 || fmt.bits > 64) throw unreadable(`a WAV sample of ${fmt.bits} bits`);
    samples = Math.floor(bytes / (channels * Math.ceil(fmt.bits / 8)));
  } else if (code === 2 || code === 0x11) {
    const head = code === 2 ? 7 : 4;
    if (fmt.blockAlign <= head * channels) throw unreadable('an ADPCM block no larger than its header');
    samples = data.reduce((n, [from, to]) => n + adpcm(to - from, fmt.blockAlign, channels, head, code === 2 ? 2 : 1), 0);
  } else throw unreadable(`WAV audio of encoding 0x${code.toString(16).padStart(4, '0')}, which this gateway does not read`);
  return samples / rate;
}
