// Audio files of every format the audio routes read, made by the tests themselves, valid to the
// byte (CRCs included) and free to lie in their headers: FLAC (STREAMINFO, then frames of
// constant or Rice-coded fixed subframes), MPEG Layer III (a Xing header, then frames of silent
// side info), Ogg (pages with their CRC-32) of Opus (packets of a chosen TOC) or Vorbis (a
// hand-made setup header of two modes), WAV of any fmt, and WebM/Matroska (EBML, Tracks,
// Clusters, SimpleBlocks, lacing). Each says what its frames hold, so a test knows the length
// the gateway must charge whatever the headers claim.

// ---- bits and checksums ----------------------------------------------------------------------

/** An MSB-first bit writer (FLAC's order). */
class MsbWriter {
  bytes: number[] = [];
  #acc = 0;
  #n = 0;
  write(value: number, bits: number): this {
    for (let i = bits - 1; i >= 0; i--) {
      this.#acc = (this.#acc << 1) | (Math.floor(value / 2 ** i) & 1);
      if (++this.#n === 8) { this.bytes.push(this.#acc); this.#acc = 0; this.#n = 0; }
    }
    return this;
  }
  align(): Buffer {
    if (this.#n > 0) this.write(0, 8 - this.#n);
    return Buffer.from(this.bytes);
  }
}

/** An LSB-first bit writer (Vorbis's order). */
class LsbWriter {
  bytes: number[] = [];
  #bit = 0;
  write(value: number, bits: number): this {
    for (let i = 0; i < bits; i++) {
      if (this.#bit === 0) this.bytes.push(0);
      if (Math.floor(value / 2 ** i) & 1) this.bytes[this.bytes.length - 1]! |= 1 << this.#bit;
      this.#bit = (this.#bit + 1) & 7;
    }
    return this;
  }
  done(): Buffer { return Buffer.from(this.bytes); }
}

const CRC8 = Uint8Array.from({ length: 256 }, (_, i) => { let c = i; for (let k = 0; k < 8; k++) c = c & 0x80 ? ((c << 1) ^ 0x07) & 0xff : (c << 1) & 0xff; return c; });
const CRC16 = Uint16Array.from({ length: 256 }, (_, i) => { let c = i << 8; for (let k = 0; k < 8; k++) c = c & 0x8000 ? ((c << 1) ^ 0x8005) & 0xffff : (c << 1) & 0xffff; return c; });
export function crc8(b: Uint8Array): number {
  let c = 0;
  for (let i = 0; i < b.length; i++) c = CRC8[c ^ b[i]!]!;
  return c;
}
function crc16(b: Uint8Array): number {
  let c = 0;
  for (let i = 0; i < b.length; i++) c = ((c << 8) & 0xffff) ^ CRC16[(c >> 8) ^ b[i]!]!;
  return c;
}
const OGG_CRC = (() => {
  const t = new Uint32Array(256);
  for (let i = 0; i < 256; i++) { let r = i << 24; for (let k = 0; k < 8; k++) r = r & 0x80000000 ? ((r << 1) ^ 0x04c11db7) >>> 0 : (r << 1) >>> 0; t[i] = r >>> 0; }
  return t;
})();
function oggCrc(b: Buffer): number {
  let c = 0;
  for (const x of b) c = ((c << 8) ^ OGG_CRC[((c >>> 24) ^ x) & 0xff]!) >>> 0;
  return c >>> 0;
}

// ---- FLAC ----------------------------------------------------------------------------------------

export interface FlacOptions {
  rate?: number;
  channels?: number;
  blockSize?: number;
  frames: number;
  /** STREAMINFO's total samples (the truth by default). */
  claimSamples?: number;
  /** 'constant' (a few bytes a frame whatever its block) or 'fixed' (Rice-coded residuals of a tone). */
  subframe?: 'constant' | 'fixed';
  /** Bytes put before frame i (garbage between frames). */
  between?: (i: number) => Buffer | undefined;
  id3?: boolean;
}

function utf8Number(n: number): number[] {
  if (n < 0x80) return [n];
  const out: number[] = [];
  let bytes = 2;
  while (n >= 2 ** (5 * bytes + 1)) bytes++;
  for (let i = bytes - 1; i > 0; i--) { out.unshift(0x80 | (n & 0x3f)); n = Math.floor(n / 64); }
  out.unshift(((0xff << (8 - bytes)) & 0xff) | n);
  return out;
}

/** One FLAC frame of `blockSize` samples (16-bit, rate from STREAMINFO). */
export function flacFrame(number: number, blockSize: number, channels: number, subframe: 'constant' | 'fixed', seed = number): Buffer {
  const head = Buffer.from([0xff, 0xf8, (7 << 4) | 0, ((channels - 1) << 4) | (4 << 1), ...utf8Number(number), (blockSize - 1) >> 8, (blockSize - 1) & 0xff]);
  if (subframe === 'constant') {
    // A subframe header byte (type 0, no wasted bits), then the one 16-bit value.
    const f = Buffer.alloc(head.length + 1 + 3 * channels + 2);
    head.copy(f);
    f[head.length] = crc8(head);
    for (let ch = 0; ch < channels; ch++) f.writeUInt16BE((seed * 37 + ch) & 0x7fff, head.length + 2 + 3 * ch);
    f.writeUInt16BE(crc16(f.subarray(0, f.length - 2)), f.length - 2);
    return f;
  }
  const w = new MsbWriter();
  for (let ch = 0; ch < channels; ch++) {
    // Fixed order 1: warm-up sample, then residuals of a slow tone, Rice parameter 2, one partition.
    w.write(0, 1).write(9, 6).write(0, 1).write(0, 16).write(0, 2).write(0, 4).write(2, 4);
    for (let i = 1; i < blockSize; i++) {
      const r = Math.round(3 * Math.sin((i + seed) / 7));
      const u = r >= 0 ? 2 * r : -2 * r - 1; // zigzag
      for (let q = u >> 2; q > 0; q--) w.write(0, 1);
      w.write(1, 1).write(u & 3, 2);
    }
  }
  const body = Buffer.concat([head, Buffer.from([crc8(head)]), w.align()]);
  const crc = crc16(body);
  return Buffer.concat([body, Buffer.from([crc >> 8, crc & 0xff])]);
}

/** A FLAC file and the seconds its frames hold. */
export function flac(o: FlacOptions): { data: Buffer; seconds: number } {
  const rate = o.rate ?? 48000, channels = o.channels ?? 1, blockSize = o.blockSize ?? 4096;
  const truth = o.frames * blockSize;
  const total = o.claimSamples ?? truth;
  const info = Buffer.alloc(34);
  info.writeUInt16BE(blockSize, 0);
  info.writeUInt16BE(blockSize, 2);
  info.writeUInt32BE(((rate << 12) | ((channels - 1) << 9) | (15 << 4) | Math.floor(total / 2 ** 32)) >>> 0, 10);
  info.writeUInt32BE(total >>> 0, 14);
  const parts: Buffer[] = [];
  if (o.id3 === true) parts.push(Buffer.from([0x49, 0x44, 0x33, 4, 0, 0, 0, 0, 0, 20]), Buffer.alloc(20, 0x41));
  parts.push(Buffer.from('fLaC'), Buffer.from([0x80, 0, 0, 34]), info);
  for (let i = 0; i < o.frames; i++) {
    const gap = o.between?.(i);
    if (gap !== undefined) parts.push(gap);
    if (o.subframe === 'fixed') { parts.push(flacFrame(i, blockSize, channels, 'fixed', i)); continue; }
    parts.push(flacFrame(i, blockSize, channels, 'constant', 1));
  }
  return { data: Buffer.concat(parts), seconds: truth / rate };
}

// ---- MPEG ----------------------------------------------------------------------------------------

/** MPEG-2.5 Layer III, 8 kHz, 8 kbit/s, mono: 72 bytes holding 576 samples (72 ms): 1 KB a second. */
const DENSE_FRAME = (() => { const f = Buffer.alloc(72); f.writeUInt32BE(0xffe318c0, 0); return f; })();
export const DENSE_MP3_FRAME_SECONDS = 576 / 8000;

/** MP3 frames led by a Xing header frame that claims `claimFrames` (with `id3`, an ID3v2 tag first). */
export function mp3Xing(frames: number, claimFrames: number, id3 = false): { data: Buffer; seconds: number } {
  const xing = Buffer.from(DENSE_FRAME);
  xing.write('Xing', 4 + 9, 'latin1');
  xing.writeUInt32BE(1, 17);
  xing.writeUInt32BE(claimFrames, 21);
  const tag = id3 ? [Buffer.from([0x49, 0x44, 0x33, 3, 0, 0, 0, 0, 1, 0]), Buffer.alloc(128, 0xff)] : [];
  return { data: Buffer.concat([...tag, xing, ...Array<Buffer>(frames).fill(DENSE_FRAME)]), seconds: frames * DENSE_MP3_FRAME_SECONDS };
}

// ---- Ogg -----------------------------------------------------------------------------------------

export interface OggPacket { data: Buffer; }

/**
 * Ogg pages of one logical stream: the first packet alone on a BOS page, then the others packed
 * up to `perPage` a page; `granule(page, packetsSoFar)` is each page's granule position.
 */
export function oggStream(serial: number, packets: Buffer[], granule: (page: number, packets: number) => bigint, perPage = 50, headers = 1): Buffer[] {
  const pages: Buffer[] = [];
  let seq = 0;
  let i = 0;
  while (i < packets.length) {
    const take = i < headers ? 1 : Math.min(perPage, packets.length - i);
    const group = packets.slice(i, i + take);
    i += take;
    const lacing: number[] = [];
    for (const p of group) { let n = p.length; while (n >= 255) { lacing.push(255); n -= 255; } lacing.push(n); }
    const flags = (seq === 0 ? 2 : 0) | (i >= packets.length ? 4 : 0);
    const h = Buffer.alloc(27 + lacing.length);
    h.write('OggS', 0, 'latin1');
    h[5] = flags;
    h.writeBigUInt64LE(BigInt.asUintN(64, granule(seq, i)), 6);
    h.writeUInt32LE(serial, 14);
    h.writeUInt32LE(seq++, 18);
    h[26] = lacing.length;
    lacing.forEach((l, k) => { h[27 + k] = l; });
    const page = Buffer.concat([h, ...group]);
    page.writeUInt32LE(oggCrc(page), 22);
    pages.push(page);
  }
  return pages;
}

export function opusHead(preSkip = 312): Buffer {
  const h = Buffer.alloc(19);
  h.write('OpusHead', 0, 'latin1');
  h[8] = 1; h[9] = 1;
  h.writeUInt16LE(preSkip, 10);
  h.writeUInt32LE(48000, 12);
  return h;
}
const OPUS_TAGS = Buffer.concat([Buffer.from('OpusTags', 'latin1'), Buffer.from([4, 0, 0, 0]), Buffer.from('test'), Buffer.alloc(4)]);

/** An Ogg Opus file of `packets` one-byte packets of TOC `toc` (0x18: one 60 ms SILK frame); the last granule claims `claimSamples`. */
export function oggOpus(packets: number, toc = 0x18, claimSamples?: number, preSkip = 312): { data: Buffer; seconds: number } {
  const per = toc === 0x18 ? 2880 : toc === 0xf8 ? 960 : 0;
  const audio = Array.from({ length: packets }, () => Buffer.from([toc]));
  const last = Math.ceil(packets / 50);
  const pages = oggStream(0x0a0b0c0d, [opusHead(preSkip), OPUS_TAGS, ...audio], (page, n) =>
    page < 2 ? 0n : page === last + 1 && claimSamples !== undefined ? BigInt(claimSamples + preSkip) : BigInt((n - 2) * per), 50, 2);
  return { data: Buffer.concat(pages), seconds: (packets * per - preSkip) / 48000 };
}

/** Vorbis identification header: mono, `rate`, block sizes 256 and 2048. */
export function vorbisIdHeader(rate: number): Buffer {
  const b = Buffer.alloc(30);
  b[0] = 1; b.write('vorbis', 1, 'latin1');
  b[11] = 1;
  b.writeUInt32LE(rate, 12);
  b[28] = (11 << 4) | 8;
  b[29] = 1;
  return b;
}

/** A minimal Vorbis setup header: one codebook, one floor 1, one residue, one mapping, two modes (short, long). */
export function vorbisSetupHeader(): Buffer {
  const w = new LsbWriter();
  w.write(5, 8); for (const c of Buffer.from('vorbis')) w.write(c, 8);
  w.write(0, 8); // one codebook
  w.write(0x564342, 24).write(1, 16).write(2, 24).write(0, 1).write(0, 1).write(0, 5).write(0, 5).write(0, 4);
  w.write(0, 6).write(0, 16); // one time-domain transform
  w.write(0, 6).write(1, 16).write(0, 5).write(0, 2).write(4, 4); // floor 1: no partitions
  w.write(0, 6).write(0, 16).write(0, 24).write(0, 24).write(0, 24).write(0, 6).write(0, 8).write(0, 3).write(0, 1); // residue 0
  w.write(0, 6).write(0, 16).write(0, 1).write(0, 1).write(0, 2).write(0, 8).write(0, 8).write(0, 8); // mapping 0
  w.write(1, 6); // two modes
  w.write(0, 1).write(0, 16).write(0, 16).write(0, 8);
  w.write(1, 1).write(0, 16).write(0, 16).write(0, 8);
  w.write(1, 1); // framing
  return w.done();
}
const VORBIS_COMMENT = Buffer.concat([Buffer.from([3]), Buffer.from('vorbis'), Buffer.from([4, 0, 0, 0]), Buffer.from('test'), Buffer.alloc(4), Buffer.from([1])]);

/** An Ogg Vorbis file of `packets` long-block packets at `rate` (1,024 samples each after the first); the last granule claims `claimSamples`. */
export function oggVorbis(packets: number, rate = 8000, claimSamples?: number): { data: Buffer; seconds: number } {
  const audio = Array.from({ length: packets }, () => Buffer.from([0x02]));
  const last = Math.ceil(packets / 50);
  const pages = oggStream(0x5eed, [vorbisIdHeader(rate), VORBIS_COMMENT, vorbisSetupHeader(), ...audio], (page, n) =>
    page < 3 ? 0n : page === last + 2 && claimSamples !== undefined ? BigInt(claimSamples) : BigInt(Math.max(0, n - 4) * 1024), 50, 3);
  return { data: Buffer.concat(pages), seconds: ((packets - 1) * 1024) / rate };
}

// ---- WAV -----------------------------------------------------------------------------------------

export interface WavOptions {
  rate?: number;
  channels?: number;
  bits?: number;
  /** The fmt's format tag (1 PCM, 3 float, 7 µ-law, 0xfffe extensible of `subformat`). */
  format?: number;
  subformat?: number;
  /** The data chunk's size as written (the truth by default). */
  dataSize?: number;
  /** Chunks after the data. */
  after?: Buffer[];
  blockAlign?: number;
}

/** A WAV file of `bytes` bytes of samples; the seconds they hold at the fmt's own rate and sample size. */
export function wavFile(bytes: number, o: WavOptions = {}): { data: Buffer; seconds: number } {
  const rate = o.rate ?? 8000, channels = o.channels ?? 1, bits = o.bits ?? 8, format = o.format ?? 1;
  const ext = format === 0xfffe;
  const fmt = Buffer.alloc(ext ? 40 : 16);
  fmt.writeUInt16LE(format, 0);
  fmt.writeUInt16LE(channels, 2);
  fmt.writeUInt32LE(rate, 4);
  fmt.writeUInt32LE(rate * channels * Math.ceil(bits / 8), 8);
  fmt.writeUInt16LE(o.blockAlign ?? channels * Math.ceil(bits / 8), 12);
  fmt.writeUInt16LE(bits, 14);
  if (ext) {
    fmt.writeUInt16LE(22, 16);
    fmt.writeUInt16LE(bits, 18);
    fmt.writeUInt32LE(channels === 1 ? 4 : 3, 20);
    fmt.writeUInt16LE(o.subformat ?? 1, 24);
    Buffer.from('000000001000800000aa00389b71', 'hex').copy(fmt, 26);
  }
  const samples = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i++) samples[i] = 128 + Math.round(40 * Math.sin(i / 5));
  const chunk = (id: string, body: Buffer, size = body.length) => {
    const h = Buffer.alloc(8);
    h.write(id, 0, 'latin1');
    h.writeUInt32LE(size >>> 0, 4);
    return Buffer.concat([h, body, body.length % 2 ? Buffer.alloc(1) : Buffer.alloc(0)]);
  };
  const body = Buffer.concat([Buffer.from('WAVE'), chunk('fmt ', fmt), chunk('data', samples, o.dataSize ?? bytes), ...(o.after ?? [])]);
  const riff = Buffer.alloc(8);
  riff.write('RIFF', 0, 'latin1');
  riff.writeUInt32LE(body.length, 4);
  return { data: Buffer.concat([riff, body]), seconds: Math.floor(bytes / (channels * Math.ceil(bits / 8))) / rate };
}

export function riffChunk(id: string, body: Buffer): Buffer {
  const h = Buffer.alloc(8);
  h.write(id, 0, 'latin1');
  h.writeUInt32LE(body.length, 4);
  return Buffer.concat([h, body, body.length % 2 ? Buffer.alloc(1) : Buffer.alloc(0)]);
}

// ---- WebM / Matroska -----------------------------------------------------------------------------

/** An EBML element: its ID's bytes, an 8-byte size (or unknown), its body. */
export function ebml(id: number, body: Buffer | Buffer[], unknownSize = false): Buffer {
  const payload = Array.isArray(body) ? Buffer.concat(body) : body;
  const idBytes: number[] = [];
  for (let v = id; v > 0; v = Math.floor(v / 256)) idBytes.unshift(v & 0xff);
  const size = Buffer.alloc(8);
  if (unknownSize) { size[0] = 0x01; size.fill(0xff, 1); } else { size.writeBigUInt64BE(BigInt(payload.length) | (1n << 56n)); }
  return Buffer.concat([Buffer.from(idBytes), size, payload]);
}
const uintEl = (id: number, v: number) => ebml(id, Buffer.from([v >> 24 & 0xff, v >> 16 & 0xff, v >> 8 & 0xff, v & 0xff]));
const floatEl = (id: number, v: number) => { const b = Buffer.alloc(8); b.writeDoubleBE(v); return ebml(id, b); };

export interface WebmOptions {
  /** Opus packets (the TOC byte alone: 0x18 is one 60 ms SILK frame) per block, and blocks per cluster. */
  blocks: number;
  perBlock?: number;
  perCluster?: number;
  /** The Segment Info's Duration (ms at the default TimecodeScale). */
  claimMs?: number;
  /** Every cluster's and block's timecode 0 (the timeline says nothing). */
  zeroTimecodes?: boolean;
  lacing?: 'none' | 'xiph' | 'ebml' | 'fixed';
  unknownSizes?: boolean;
  codecDelayNs?: number;
}

/** A WebM file with one Opus track; the seconds its packets hold (the codec delay off). */
export function webmOpus(o: WebmOptions): { data: Buffer; seconds: number } {
  const perBlock = o.perBlock ?? 1, perCluster = o.perCluster ?? 100, lacing = o.lacing ?? (perBlock > 1 ? 'xiph' : 'none');
  const header = ebml(0x1a45dfa3, [ebml(0x4282, Buffer.from('webm')), uintEl(0x4287, 4), uintEl(0x4285, 2)]);
  const info = ebml(0x1549a966, [uintEl(0x2ad7b1, 1_000_000), floatEl(0x4489, o.claimMs ?? 1000)]);
  const entry = [uintEl(0xd7, 1), uintEl(0x83, 2), ebml(0x86, Buffer.from('A_OPUS')), ebml(0x63a2, opusHead(0)), ebml(0xe1, [floatEl(0xb5, 48000), uintEl(0x9f, 1)])];
  if (o.codecDelayNs !== undefined) entry.push(uintEl(0x56aa, o.codecDelayNs));
  const tracks = ebml(0x1654ae6b, ebml(0xae, entry));
  const clusters: Buffer[] = [];
  let blocks: Buffer[] = [];
  const lace = { none: 0, xiph: 1, fixed: 2, ebml: 3 }[lacing];
  for (let i = 0; i < o.blocks; i++) {
    const t = o.zeroTimecodes ? 0 : ((i % perCluster) * perBlock * 60) & 0x7fff;
    const frames = Array.from({ length: perBlock }, () => Buffer.from([0x18]));
    let laced: Buffer;
    if (lace === 0) laced = frames[0]!;
    else if (lace === 1) laced = Buffer.concat([Buffer.from([perBlock - 1]), Buffer.alloc(perBlock - 1, 1), ...frames]);
    else if (lace === 2) laced = Buffer.concat([Buffer.from([perBlock - 1]), ...frames]);
    else laced = Buffer.concat([Buffer.from([perBlock - 1, 0x81]), Buffer.alloc(perBlock - 2, 0xbf), ...frames]);
    blocks.push(ebml(0xa3, [Buffer.from([0x81, t >> 8, t & 0xff, 0x80 | (lace << 1)]), laced]));
    if (blocks.length === perCluster || i === o.blocks - 1) {
      const timecode = o.zeroTimecodes ? 0 : Math.floor(i / perCluster) * perCluster * perBlock * 60;
      clusters.push(ebml(0x1f43b675, [uintEl(0xe7, timecode), ...blocks], o.unknownSizes === true));
      blocks = [];
    }
  }
  const segment = ebml(0x18538067, [info, tracks, ...clusters], o.unknownSizes === true);
  const delay = o.codecDelayNs === undefined ? 0 : Math.round((o.codecDelayNs * 48000) / 1e9);
  return { data: Buffer.concat([header, segment]), seconds: (o.blocks * perBlock * 2880 - delay) / 48000 };
}
