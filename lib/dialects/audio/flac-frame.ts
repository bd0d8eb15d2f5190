// One FLAC frame: its header (sync code, block size, rate, channels, sample size, the UTF-8
// coded frame or sample number, CRC-8: a header whose CRC-8 fails is a false sync, as every
// decoder takes it) and where the frame ends, found as a decoder finds it: by reading its
// subframes (constant, verbatim, fixed and LPC predictors, Rice-coded residuals) without
// computing a sample. A frame's length is in no header, so this is the only way to know where
// the next frame must begin; a stray sync code inside a frame's data is never taken for a
// frame. The frame's CRC-16 is not checked: some decoders play a frame whose CRC-16 fails.
// Used by flac.ts (native FLAC) and, for the header alone, by Ogg FLAC and Matroska A_FLAC.

import { MAX_RATE } from './walk.js';

export interface FlacInfo {
  /** STREAMINFO's rate and sample size: what a frame header's code 0 stands for. */
  rate: number;
  bps: number;
}

export interface FlacHeader {
  /** Bytes of the header, its CRC-8 included. */
  size: number;
  blockSize: number;
  rate: number;
  channels: number;
  /** 8, 9, 10: left/side, side/right, mid/side (a side channel takes one bit more). */
  assignment: number;
  bps: number;
}

const RATE_CODES = [0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000];
const BPS_CODES = [0, 8, 12, -1, 16, 20, 24, 32];

const CRC8 = (() => {
  const t = new Uint8Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i;
    for (let k = 0; k < 8; k++) c = c & 0x80 ? ((c << 1) ^ 0x07) & 0xff : (c << 1) & 0xff;
    t[i] = c;
  }
  return t;
})();

/**
 * The frame header at `p` if it is one (CRC-8 included), else undefined; written into `into`
 * when given (a walk of a million frames allocates nothing per frame).
 */
export function flacHeader(b: Uint8Array, p: number, info: FlacInfo, into?: FlacHeader): FlacHeader | undefined {
  if (p + 6 > b.length || b[p] !== 0xff || (b[p + 1]! & 0xfe) !== 0xf8) return undefined;
  const b2 = b[p + 2]!, b3 = b[p + 3]!;
  const bsCode = b2 >> 4, rateCode = b2 & 15, assignment = b3 >> 4, bpsCode = (b3 >> 1) & 7;
  if (bsCode === 0 || rateCode === 15 || assignment > 10 || bpsCode === 3 || (b3 & 1) !== 0) return undefined;
  // The frame (or sample) number, coded as UTF-8 of up to 7 bytes; only its length matters.
  let q = p + 4;
  const lead = b[q]!;
  let extra = lead < 0x80 ? 0 : lead >= 0xc0 && lead < 0xe0 ? 1 : lead >= 0xe0 && lead < 0xf0 ? 2 : lead >= 0xf0 && lead < 0xf8 ? 3
    : lead >= 0xf8 && lead < 0xfc ? 4 : lead >= 0xfc && lead < 0xfe ? 5 : lead === 0xfe ? 6 : -1;
  if (extra < 0) return undefined;
  q++;
  for (; extra > 0; extra--, q++) if (q >= b.length || (b[q]! & 0xc0) !== 0x80) return undefined;
  const u16 = (at: number) => ((b[at] ?? 0) << 8) | (b[at + 1] ?? 0);
  let blockSize: number;
  if (bsCode === 1) blockSize = 192;
  else if (bsCode <= 5) blockSize = 576 << (bsCode - 2);
  else if (bsCode === 6) blockSize = (b[q++] ?? 0) + 1;
  else if (bsCode === 7) {
    blockSize = u16(q) + 1;
    q += 2;
  } else blockSize = 256 << (bsCode - 8);
  let rate: number;
  if (rateCode === 0) rate = info.rate;
  else if (rateCode <= 11) rate = RATE_CODES[rateCode]!;
  else if (rateCode === 12) rate = (b[q++] ?? 0) * 1000;
  else {
    rate = u16(q) * (rateCode === 14 ? 10 : 1);
    q += 2;
  }
  const bps = bpsCode === 0 ? info.bps : BPS_CODES[bpsCode]!;
  if (q >= b.length || blockSize <= 0 || blockSize > 65535 || rate <= 0 || rate > MAX_RATE || bps < 4 || bps > 32) return undefined;
  let crc = 0;
  for (let i = p; i < q; i++) crc = CRC8[crc ^ b[i]!]!;
  if (crc !== b[q]) return undefined;
  const h = into ?? { size: 0, blockSize: 0, rate: 0, channels: 0, assignment: 0, bps: 0 };
  h.size = q + 1 - p;
  h.blockSize = blockSize;
  h.rate = rate;
  h.channels = assignment < 8 ? assignment + 1 : 2;
  h.assignment = assignment;
  h.bps = bps;
  return h;
}

/**
 * Where a frame ends: `ok` with the offset after its CRC-16; `cut` when the file ends inside it
 * (or a Rice quotient runs past 64 KiB of zeros: read no further); `bad` when it is not a frame
 * (a reserved code), `end` then being how far it was read.
 */
export interface FrameEnd {
  state: 'ok' | 'cut' | 'bad';
  end: number;
  /** Bytes of residual scanned (skipped fields cost nothing): what reading it cost. */
  work: number;
}

/** Reused by every call of flacFrameEnd (its answer is read before the next call). */
const reader: { bits: Bits | undefined; end: FrameEnd } = { bits: undefined, end: { state: 'ok', end: 0, work: 0 } };

/**
 * Where the frame whose header is `h` at `p` ends (after its CRC-16), read through its
 * subframes. The answer is one object reused by the next call: read it before.
 */
export function flacFrameEnd(b: Uint8Array, p: number, h: FlacHeader): FrameEnd {
  const r = reader.bits?.reset(b, (p + h.size) * 8) ?? (reader.bits = new Bits(b, (p + h.size) * 8));
  const out = reader.end;
  let state: FrameEnd['state'] = 'ok';
  let end = 0;
  for (let ch = 0; ch < h.channels && state === 'ok'; ch++) {
    const side = (h.assignment === 8 && ch === 1) || (h.assignment === 9 && ch === 0) || (h.assignment === 10 && ch === 1);
    const stop = subframe(r, h.blockSize, h.bps + (side ? 1 : 0));
    if (stop !== undefined) {
      state = stop;
      end = Math.min(b.length, Math.ceil(r.pos / 8));
    }
  }
  if (state === 'ok') {
    end = Math.ceil(r.pos / 8) + 2;
    if (end > b.length) {
      state = 'cut';
      end = b.length;
    }
  }
  out.state = state;
  out.end = end;
  out.work = r.work;
  reader.bits = r.release();
  return out;
}

/** Reads one subframe; undefined when it was whole, else what stopped it. */
function subframe(r: Bits, blockSize: number, bps: number): 'cut' | 'bad' | undefined {
  if (r.left < 8) return 'cut';
  if (r.read(1) !== 0) return 'bad';
  const type = r.read(6);
  if (r.read(1) === 1) {
    const wasted = r.unary();
    if (wasted < 0) return 'cut';
    bps -= wasted + 1;
    if (bps <= 0) return 'bad';
  }
  if (type === 0) r.skip(bps);
  else if (type === 1) r.skip(blockSize * bps);
  else if (type >= 8 && type <= 12) {
    const order = type - 8;
    r.skip(order * bps);
    return residual(r, blockSize, order);
  } else if (type >= 32) {
    const order = (type & 31) + 1;
    r.skip(order * bps);
    if (r.left < 9) return 'cut';
    const precision = r.read(4);
    if (precision === 15) return 'bad';
    r.skip(5 + order * (precision + 1));
    return residual(r, blockSize, order);
  } else return 'bad';
  return r.left < 0 ? 'cut' : undefined;
}

function residual(r: Bits, blockSize: number, order: number): 'cut' | 'bad' | undefined {
  if (r.left < 6) return 'cut';
  const method = r.read(2);
  if (method > 1) return 'bad';
  const paramBits = method === 0 ? 4 : 5;
  const escape = method === 0 ? 15 : 31;
  const partitionOrder = r.read(4);
  const partitions = 1 << partitionOrder;
  const per = blockSize >> partitionOrder;
  if (per << partitionOrder !== blockSize || per < order) return 'bad';
  for (let i = 0; i < partitions; i++) {
    const n = i === 0 ? per - order : per;
    if (r.left < paramBits) return 'cut';
    const k = r.read(paramBits);
    if (k === escape) {
      if (r.left < 5) return 'cut';
      r.skip(n * r.read(5));
    } else if (!r.rice(n, k)) return 'cut';
    if (r.left < 0) return 'cut';
  }
  return undefined;
}

const EMPTY = new Uint8Array(0);

/** The longest run of zero bytes read as one Rice quotient (512 kbit) before reading stops. */
const MAX_UNARY_BYTES = 64 * 1024;

/** An MSB-first bit reader over a buffer; reads past the end give zeros, and `left` goes below 0. */
class Bits {
  #b: Uint8Array;
  #end: number;
  pos: number;
  /** Bytes scanned by rice(). */
  work = 0;

  constructor(b: Uint8Array, pos: number) {
    this.#b = b;
    this.#end = b.length * 8;
    this.pos = pos;
  }

  reset(b: Uint8Array, pos: number): this {
    this.#b = b;
    this.#end = b.length * 8;
    this.pos = pos;
    this.work = 0;
    return this;
  }

  /** Lets go of the buffer (kept for reuse, the reader holds no request's bytes). */
  release(): this {
    this.#b = EMPTY;
    return this;
  }

  get left(): number {
    return this.#end - this.pos;
  }

  skip(n: number): void {
    this.pos += n;
  }

  /** n ≤ 24 bits. */
  read(n: number): number {
    const b = this.#b;
    const byte = Math.floor(this.pos / 8);
    const w = (((b[byte] ?? 0) << 24) | ((b[byte + 1] ?? 0) << 16) | ((b[byte + 2] ?? 0) << 8) | (b[byte + 3] ?? 0)) >>> 0;
    const v = ((w << (this.pos % 8)) >>> 0) >>> (32 - n);
    this.pos += n;
    return v;
  }

  /** Zeros up to a one (consumed): their count, or -1 when the buffer ends first. */
  unary(): number {
    const start = this.pos;
    if (!this.rice(1, 0)) return -1;
    return this.pos - start - 1;
  }

  /** Skips `count` Rice codes of parameter `k`; false when the buffer ends inside one. */
  rice(count: number, k: number): boolean {
    const b = this.#b;
    const len = b.length;
    let pos = this.pos;
    // Bit positions fit 32 bits (files under 512 MiB: walkFlac refuses larger): integer ops.
    for (let i = 0; i < count; i++) {
      let byte = pos >>> 3;
      if (byte >= len) {
        pos = Math.max(pos, this.#end + 1);
        break;
      }
      let v = (b[byte]! << (pos & 7)) & 0xff;
      if (v === 0) {
        const from = ++byte;
        const stop = Math.min(len, from + MAX_UNARY_BYTES);
        while (byte < stop && b[byte] === 0) byte++;
        if (byte >= stop) {
          // No encoder writes a quotient of megabits, but a decoder would read on: the frame
          // counts as one the file ends inside (whole), and the search for frames goes on.
          pos = this.#end + 1;
          break;
        }
        pos = byte * 8;
        v = b[byte]!;
      }
      pos += Math.clz32(v) - 24 + 1 + k;
    }
    this.work += (pos - this.pos) / 8;
    this.pos = pos;
    return pos <= this.#end;
  }
}
