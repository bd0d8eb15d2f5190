// Vorbis packets measured as the decoder sizes them (Vorbis I spec §4.3): each audio packet
// names a mode, each mode says a short or a long block (the identification header's two block
// sizes), and a packet returns a quarter of the previous block plus a quarter of its own. The
// modes are the last part of the setup header, after the codebooks, floors, residues and
// mappings, so the setup header is read through from its start (never guessed at from its
// end, which a crafted header could mislead). Nothing here trusts a granule position: Ogg's
// end trim is ogg.ts's business, checked against what these packets hold.

import { MAX_RATE } from './walk.js';

export interface VorbisId {
  channels: number;
  rate: number;
  short: number;
  long: number;
}

/** The identification header (`\x01vorbis`), or undefined when it is not a readable one. */
export function vorbisId(p: Uint8Array): VorbisId | undefined {
  if (p.length < 30 || p[0] !== 1 || !isVorbis(p)) return undefined;
  const channels = p[11]!;
  const rate = (p[12]! | (p[13]! << 8) | (p[14]! << 16) | (p[15]! << 24)) >>> 0;
  const short = 1 << (p[28]! & 15);
  const long = 1 << (p[28]! >> 4);
  if (channels === 0 || rate === 0 || rate > MAX_RATE || short < 64 || long > 8192 || short > long) return undefined;
  return { channels, rate, short, long };
}

function isVorbis(p: Uint8Array): boolean {
  return p[1] === 0x76 && p[2] === 0x6f && p[3] === 0x72 && p[4] === 0x62 && p[5] === 0x69 && p[6] === 0x73;
}

/** An LSB-first bit reader (Vorbis packs bits from the low end); reading past the end sets `over`. */
class Bits {
  #pos: number;
  readonly #end: number;
  constructor(private readonly b: Uint8Array, byte: number) {
    this.#pos = byte * 8;
    this.#end = b.length * 8;
  }
  get over(): boolean {
    return this.#pos > this.#end;
  }
  get left(): number {
    return this.#end - this.#pos;
  }
  read(n: number): number {
    let v = 0;
    for (let i = 0; i < n; i++) {
      const bit = ((this.b[this.#pos >>> 3] ?? 0) >> (this.#pos & 7)) & 1;
      v += bit * 2 ** i;
      this.#pos++;
    }
    return v;
  }
  skip(n: number): void {
    this.#pos += n;
  }
}

const ilog = (x: number): number => (x <= 0 ? 0 : 32 - Math.clz32(x));

function lookup1Values(entries: number, dims: number): number {
  let r = Math.floor(entries ** (1 / dims));
  while ((r + 1) ** dims <= entries) r++;
  while (r > 0 && r ** dims > entries) r--;
  return r;
}

/** Reads one codebook; false when it is not one. */
function codebook(r: Bits): boolean {
  if (r.read(24) !== 0x564342) return false;
  const dims = r.read(16);
  const entries = r.read(24);
  if (r.read(1) === 1) {
    // Ordered: runs of entries of rising lengths.
    let entry = 0;
    let length = r.read(5) + 1;
    while (entry < entries) {
      entry += r.read(ilog(entries - entry));
      if (++length > 33 || r.over) return false;
    }
    if (entry > entries) return false;
  } else if (r.read(1) === 1) {
    // Sparse: a flag per entry, then a length for each used one.
    if (r.left < entries) return false;
    for (let i = 0; i < entries; i++) if (r.read(1) === 1) r.skip(5);
  } else r.skip(entries * 5);
  const lookup = r.read(4);
  if (lookup === 1 || lookup === 2) {
    r.skip(64);
    const bits = r.read(4) + 1;
    r.skip(1);
    const values = lookup === 1 ? (dims === 0 ? 0 : lookup1Values(entries, dims)) : entries * dims;
    r.skip(values * bits);
  } else if (lookup !== 0) return false;
  return !r.over;
}

function floor(r: Bits): boolean {
  const type = r.read(16);
  if (type === 0) {
    r.skip(8 + 16 + 16 + 6 + 8);
    r.skip((r.read(4) + 1) * 8);
    return true;
  }
  if (type !== 1) return false;
  const partitions = r.read(5);
  const classes: number[] = [];
  let max = -1;
  for (let i = 0; i < partitions; i++) {
    const c = r.read(4);
    classes.push(c);
    if (c > max) max = c;
  }
  const dims: number[] = [];
  for (let i = 0; i <= max; i++) {
    dims.push(r.read(3) + 1);
    const sub = r.read(2);
    if (sub > 0) r.skip(8);
    r.skip((1 << sub) * 8);
  }
  r.skip(2);
  const rangeBits = r.read(4);
  for (const c of classes) r.skip(dims[c]! * rangeBits);
  return true;
}

function residue(r: Bits): boolean {
  if (r.read(16) > 2) return false;
  r.skip(24 * 3);
  const classifications = r.read(6) + 1;
  r.skip(8);
  const cascades: number[] = [];
  for (let i = 0; i < classifications; i++) {
    const low = r.read(3);
    cascades.push(r.read(1) === 1 ? (r.read(5) << 3) | low : low);
  }
  for (const c of cascades) for (let j = 0; j < 8; j++) if (c & (1 << j)) r.skip(8);
  return true;
}

function mapping(r: Bits, channels: number): boolean {
  if (r.read(16) !== 0) return false;
  const submaps = r.read(1) === 1 ? r.read(4) + 1 : 1;
  if (r.read(1) === 1) r.skip((r.read(8) + 1) * 2 * ilog(channels - 1));
  if (r.read(2) !== 0) return false;
  if (submaps > 1) r.skip(channels * 4);
  r.skip(submaps * 24);
  return true;
}

/** Each mode's block flag (true: long), from the setup header (`\x05vorbis`); undefined when unreadable. */
export function vorbisModes(p: Uint8Array, id: VorbisId): boolean[] | undefined {
  if (p.length < 8 || p[0] !== 5 || !isVorbis(p)) return undefined;
  const r = new Bits(p, 7);
  const books = r.read(8) + 1;
  for (let i = 0; i < books; i++) if (!codebook(r)) return undefined;
  const times = r.read(6) + 1;
  for (let i = 0; i < times; i++) if (r.read(16) !== 0) return undefined;
  const sections: Array<(r: Bits) => boolean> = [floor, residue, (x) => mapping(x, id.channels)];
  for (const read of sections) {
    const count = r.read(6) + 1;
    for (let i = 0; i < count; i++) if (!read(r) || r.over) return undefined;
  }
  const modes: boolean[] = [];
  const count = r.read(6) + 1;
  for (let i = 0; i < count; i++) {
    const long = r.read(1) === 1;
    if (r.read(16) !== 0 || r.read(16) !== 0) return undefined;
    r.skip(8);
    modes.push(long);
  }
  if (r.read(1) !== 1 || r.over) return undefined;
  return modes;
}

/** Counts a Vorbis stream's audio packets, one after another. */
export class VorbisPackets {
  #previous = 0;
  readonly #modeBits: number;
  constructor(private readonly id: VorbisId, private readonly modes: boolean[]) {
    this.#modeBits = ilog(modes.length - 1);
  }

  /** Samples the packet b[p, p + length) returns (none for the first, a header or an unreadable one). */
  samples(b: Uint8Array, p: number, length: number): number {
    if (length === 0) return 0;
    // The packet type bit, then the mode number (at most 6 bits): all in the first byte.
    const first = b[p]!;
    if ((first & 1) !== 0) return 0;
    const mode = this.modes[(first >> 1) & ((1 << this.#modeBits) - 1)];
    if (mode === undefined) return 0;
    const size = mode ? this.id.long : this.id.short;
    const out = this.#previous === 0 ? 0 : (this.#previous + size) / 4;
    this.#previous = size;
    return out;
  }
}
