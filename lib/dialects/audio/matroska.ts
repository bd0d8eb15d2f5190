// WebM and Matroska measured by their blocks, not by the Segment Info's Duration nor by the
// clusters' and blocks' timecodes (fields a file sets as it likes: all clusters at 0 would make
// hours look like nothing). Each SimpleBlock and Block is split into its frames (no lacing,
// Xiph, EBML or fixed lacing) and each frame counted by its track's codec: Opus by its TOC,
// Vorbis by the modes of the setup header in CodecPrivate, FLAC and MPEG audio by their
// frames, PCM by its bytes. Other codecs (AAC among them: its rate is in a config that the
// track's SamplingFrequency need not match), and audio tracks with a content encoding
// (compression, encryption), are refused. Tracks side by side are charged the longest;
// Segments one after another are added up; a Segment's first track list is its tracks. An
// element's size is followed only when another element, or the end of the file, is where it
// says, and it passes over no Cluster's ID; otherwise the search goes on from inside it a byte
// at a time, counting the blocks it finds and following no size until the next Cluster, so no
// garbage and no forged size hides the blocks after it. Opus's CodecDelay (or its OpusHead
// pre-skip, at most 65,535 samples) is taken off.

import { type FlacInfo } from './flac-frame.js';
import { countFlacFrames, streamInfo } from './flac.js';
import { walkMpeg } from './mpeg.js';
import { opusHead, opusPacketSamples } from './opus.js';
import { vorbisId, vorbisModes, VorbisPackets } from './vorbis.js';
import { MAX_RATE, OPUS_RATE, runSync, Tally, unreadable, type Walk, YIELD_WORK } from './walk.js';

const ID = {
  EBML: 0x1a45dfa3, Segment: 0x18538067, Cluster: 0x1f43b675, Tracks: 0x1654ae6b, TrackEntry: 0xae, TrackNumber: 0xd7, TrackType: 0x83,
  CodecID: 0x86, CodecPrivate: 0x63a2, CodecDelay: 0x56aa, Audio: 0xe1, SamplingFrequency: 0xb5, Channels: 0x9f, BitDepth: 0x6264,
  ContentEncodings: 0x6d80, SimpleBlock: 0xa3, BlockGroup: 0xa0, Block: 0xa1,
} as const;
const CLUSTER_ID = Buffer.from([0x1f, 0x43, 0xb6, 0x75]);
/** The largest Tracks element read (a Vorbis track's CodecPrivate is a few kilobytes). */
const MAX_TRACKS_BYTES = 256 * 1024;
/** The most audio tracks read in one Segment. */
const MAX_TRACKS = 64;

/** Whether a Cluster's ID is in b[from, to). */
function passesCluster(b: Buffer, from: number, to: number): boolean {
  if (to - from > 256) return b.subarray(from, to).indexOf(CLUSTER_ID) !== -1;
  for (let i = from; i + 4 <= to; i++) if (b[i] === 0x1f && b[i + 1] === 0x43 && b[i + 2] === 0xb6 && b[i + 3] === 0x75) return true;
  return false;
}

/** The IDs of a Matroska file's structure; anything else is not an element but garbage. */
const KNOWN = new Set([
  ID.EBML, ID.Segment, ID.Cluster, ID.Tracks, ID.SimpleBlock, ID.BlockGroup, ID.Block,
  0x114d9b74, 0x1549a966, 0x1c53bb6b, 0x1254c367, 0x1043a770, 0x1941a469, // SeekHead, Info, Cues, Tags, Chapters, Attachments
  0xec, 0xbf, 0xe7, 0xa7, 0xab, 0x5854, 0xaf, // Void, CRC-32, Timecode, Position, PrevSize, SilentTracks, EncryptedBlock
  0x9b, 0xfb, 0xfa, 0xfd, 0xa2, 0xa4, 0x75a1, 0x75a2, 0x8e, // a BlockGroup's children
]);

interface Element { id: number; start: number; size: number | undefined; }

/** An element's ID and size at `p` (size undefined when unknown); undefined when they cannot be read. */
function element(b: Uint8Array, p: number): Element | undefined {
  const first = b[p];
  if (first === undefined || first === 0) return undefined;
  const idLen = Math.clz32(first) - 23;
  if (idLen > 4 || p + idLen > b.length) return undefined;
  let id = 0;
  for (let i = 0; i < idLen; i++) id = id * 256 + b[p + i]!;
  const size = vint(b, p + idLen);
  if (size === undefined) return undefined;
  return { id, start: p + idLen + size.length, size: size.unknown ? undefined : size.value };
}

/** An EBML variable-length integer at `p`, its marker taken off. */
function vint(b: Uint8Array, p: number): { value: number; length: number; unknown: boolean } | undefined {
  const first = b[p];
  if (first === undefined || first === 0) return undefined;
  const length = Math.clz32(first) - 23;
  if (p + length > b.length) return undefined;
  let value = first & (0xff >> length);
  let ones = value === 0xff >> length;
  for (let i = 1; i < length; i++) {
    value = value * 256 + b[p + i]!;
    ones &&= b[p + i] === 0xff;
  }
  return { value, length, unknown: ones };
}

function uint(b: Uint8Array, p: number, size: number): number {
  let v = 0;
  for (let i = 0; i < size && i < 8; i++) v = v * 256 + b[p + i]!;
  return v;
}

interface Track {
  number: number;
  audio: boolean;
  codec: string;
  priv: Buffer | undefined;
  delayNs: number;
  rate: number;
  channels: number;
  bitDepth: number;
  encoded: boolean;
}

/** One audio track's counter: each frame's samples into its tally. */
type Counter = { tally: Tally; frame(b: Buffer, p: number, length: number): void; trim(): void };

function counter(t: Track): Counter {
  const tally = new Tally();
  const codec = t.codec;
  if (t.encoded) throw unreadable('a Matroska audio track with a content encoding');
  if (codec === 'A_OPUS') {
    const delay = t.delayNs > 0 ? Math.round((t.delayNs * OPUS_RATE) / 1e9) : (t.priv && opusHead(t.priv)) ?? 0;
    return { tally, frame: (b, p, n) => tally.add(opusPacketSamples(b, p, n), OPUS_RATE), trim: () => tally.trim(Math.min(delay, 65535), OPUS_RATE) };
  }
  if (codec === 'A_VORBIS') {
    const headers = t.priv === undefined ? undefined : xiphHeaders(t.priv);
    const id = headers && vorbisId(headers[0]!);
    const modes = id && vorbisModes(headers![2]!, id);
    if (id === undefined || modes === undefined) throw unreadable('a Vorbis track whose headers cannot be read');
    const packets = new VorbisPackets(id, modes);
    return { tally, frame: (b, p, n) => tally.add(packets.samples(b, p, n), id.rate), trim: () => {} };
  }
  if (codec === 'A_FLAC') {
    const info: FlacInfo = t.priv !== undefined && t.priv.length >= 42 && t.priv.toString('latin1', 0, 4) === 'fLaC' ? streamInfo(t.priv, 8) : { rate: 0, bps: 0 };
    return { tally, frame: (b, p, n) => countFlacFrames(b.subarray(p, p + n), info, tally), trim: () => {} };
  }
  if (codec === 'A_MPEG/L3' || codec === 'A_MPEG/L2' || codec === 'A_MPEG/L1') {
    return { tally, frame: (b, p, n) => void runSync(walkMpeg(b.subarray(p, p + n), 0, n, tally, false)), trim: () => {} };
  }
  const rate = Math.round(t.rate);
  if (rate <= 0 || rate > MAX_RATE) throw unreadable('a Matroska audio track without a usable sampling frequency');
  if (codec === 'A_PCM/INT/LIT' || codec === 'A_PCM/INT/BIG' || codec === 'A_PCM/FLOAT/IEEE') {
    const frameBytes = t.channels * Math.ceil(t.bitDepth / 8);
    if (frameBytes <= 0) throw unreadable('a PCM track without channels or bit depth');
    return { tally, frame: (_b, _p, n) => tally.add(Math.floor(n / frameBytes), rate), trim: () => {} };
  }
  throw unreadable(`a Matroska audio track of a codec this gateway does not read (${/^[A-Z0-9_/]{1,32}$/.test(codec) ? codec : 'unknown'})`);
}

/** The three Vorbis headers, Xiph-laced in CodecPrivate. */
function xiphHeaders(p: Buffer): Buffer[] | undefined {
  if (p[0] !== 2) return undefined;
  let q = 1;
  const sizes: number[] = [];
  for (let i = 0; i < 2; i++) {
    let n = 0;
    while (q < p.length && p[q] === 255) n += p[q++]!;
    if (q >= p.length) return undefined;
    sizes.push(n + p[q++]!);
  }
  const a = p.subarray(q, q + sizes[0]!), c = p.subarray(q + sizes[0]! + sizes[1]!);
  return a.length === sizes[0] ? [a, p.subarray(q + sizes[0]!, q + sizes[0]! + sizes[1]!), c] : undefined;
}

/** The tracks of a Tracks element's body b[p, end). */
function tracks(b: Buffer, p: number, end: number): Track[] {
  const out: Track[] = [];
  const walk = (from: number, to: number, visit: (e: Element, to: number) => void) => {
    for (let q = from; q < to;) {
      const e = element(b, q);
      if (e === undefined || e.size === undefined) return;
      const stop = Math.min(to, e.start + e.size);
      visit(e, stop);
      q = stop;
    }
  };
  walk(p, end, (entry, entryEnd) => {
    if (entry.id !== ID.TrackEntry) return;
    const t: Track = { number: 0, audio: false, codec: '', priv: undefined, delayNs: 0, rate: 8000, channels: 1, bitDepth: 0, encoded: false };
    walk(entry.start, entryEnd, (e, to) => {
      const n = to - e.start;
      if (e.id === ID.TrackNumber) t.number = uint(b, e.start, n);
      else if (e.id === ID.TrackType) t.audio = uint(b, e.start, n) === 2;
      else if (e.id === ID.CodecID) t.codec = b.toString('latin1', e.start, to).replace(/\0+$/, '');
      else if (e.id === ID.CodecPrivate) t.priv = b.subarray(e.start, to);
      else if (e.id === ID.CodecDelay) t.delayNs = uint(b, e.start, n);
      else if (e.id === ID.ContentEncodings) t.encoded = true;
      else if (e.id === ID.Audio) {
        walk(e.start, to, (a, at) => {
          const m = at - a.start;
          if (a.id === ID.SamplingFrequency) t.rate = m === 4 ? b.readFloatBE(a.start) : m === 8 ? b.readDoubleBE(a.start) : 0;
          else if (a.id === ID.Channels) t.channels = uint(b, a.start, m);
          else if (a.id === ID.BitDepth) t.bitDepth = uint(b, a.start, m);
        });
      }
    });
    if (t.audio || (t.codec.startsWith('A_') && t.number > 0)) out.push(t);
  });
  return out;
}

/** The frames of the block b[p, end): each frame's offset and length to `frame`. */
function blockFrames(b: Buffer, p: number, end: number, frame: (at: number, length: number) => void): void {
  const track = vint(b, p);
  if (track === undefined) return;
  let q = p + track.length + 3;
  if (q > end) return;
  const lacing = (b[q - 1]! >> 1) & 3;
  if (lacing === 0) return frame(q, end - q);
  if (q >= end) return;
  const n = b[q++]! + 1;
  const sizes: number[] = [];
  if (lacing === 2) {
    const each = Math.floor((end - q) / n);
    for (let i = 0; i < n; i++, q += each) frame(q, each);
    return;
  }
  for (let i = 0; i < n - 1; i++) {
    if (lacing === 1) {
      let s = 0;
      while (q < end && b[q] === 255) s += b[q++]!;
      if (q >= end) return;
      sizes.push(s + b[q++]!);
    } else {
      const v = vint(b, q);
      if (v === undefined) return;
      q += v.length;
      sizes.push(i === 0 ? v.value : sizes[i - 1]! + v.value - (2 ** (7 * v.length - 1) - 1));
    }
  }
  for (const s of sizes) {
    if (s < 0 || q + s > end) return;
    frame(q, s);
    q += s;
  }
  frame(q, end - q);
}

/** The WebM or Matroska file whose EBML header is at `start`: its length in seconds. */
export function* walkMatroska(b: Buffer, start: number): Walk<number> {
  let work = 0;
  let total = 0;
  let counters: Map<number, Counter> | undefined;
  const finish = () => {
    let longest = 0;
    for (const c of counters?.values() ?? []) {
      c.trim();
      longest = Math.max(longest, c.tally.seconds);
    }
    total += longest;
  };
  const known = (at: number) => {
    const e = element(b, at);
    return e !== undefined && KNOWN.has(e.id);
  };
  let audio = false;
  // In sync, sizes are followed; out of it (after an element whose size did not lead to another),
  // the search goes a byte at a time, counting the blocks it finds, and follows no size until a
  // Cluster (a 4-byte ID: no chance match) puts it back in sync.
  let synced = true;
  let p = start;
  while (p < b.length) {
    const e = element(b, p);
    const id = e === undefined ? -1 : e.id;
    if (e === undefined || !KNOWN.has(id) || (!synced && id !== ID.Cluster && id !== ID.Segment && id !== ID.SimpleBlock && id !== ID.Block)) {
      synced = false;
      p++;
      if ((work += 2) >= YIELD_WORK) {
        yield work;
        work = 0;
      }
      continue;
    }
    if (id === ID.Segment || id === ID.Cluster || id === ID.BlockGroup) {
      if (id === ID.Segment) {
        if (counters !== undefined) finish();
        counters = undefined;
      }
      synced = true;
      p = e.start;
      if ((work += 2) >= YIELD_WORK) {
        yield work;
        work = 0;
      }
      continue;
    }
    const end = e.size === undefined ? undefined : e.start + e.size;
    // A size is trusted when another element, or the very end of the file, is where it says.
    // Nor is a size that would pass over a Cluster's ID: a forged size never hides a Cluster.
    const trusted: boolean = synced && end !== undefined && (end === b.length || (end < b.length && known(end))) && !passesCluster(b, e.start, end);
    if (id === ID.SimpleBlock || id === ID.Block) {
      const stop = Math.min(end ?? b.length, b.length);
      const track = vint(b, e.start);
      if (counters === undefined) throw unreadable('Matroska blocks before the track list');
      const c = track === undefined ? undefined : counters.get(track.value);
      if (c !== undefined) blockFrames(b, e.start, stop, (at, n) => c.frame(b, at, n));
    } else if (id === ID.Tracks && end !== undefined && counters === undefined) {
      // The Segment's first track list is its tracks (demuxers read no second one). Read at
      // once: bounded, so that reading it never holds the event loop.
      if (e.size! > MAX_TRACKS_BYTES) throw unreadable('a Matroska track list larger than 256 KiB');
      counters = new Map();
      for (const t of tracks(b, e.start, Math.min(end, b.length))) {
        if (counters.size >= MAX_TRACKS) throw unreadable(`more than ${MAX_TRACKS} Matroska audio tracks`);
        if (!counters.has(t.number)) counters.set(t.number, counter(t));
        audio = true;
      }
    }
    synced = trusted;
    const next = trusted && end !== undefined ? end : p + 1;
    if ((work += next - p + 1) >= YIELD_WORK) {
      yield work;
      work = 0;
    }
    p = next;
  }
  finish();
  if (!audio) throw unreadable('no audio track in this WebM or Matroska file');
  return total;
}
