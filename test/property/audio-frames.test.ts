// Property (CONTRACT §21, "Audio is charged for what it holds"): files of every format the
// audio routes read, built frame by frame here, with headers that lie (STREAMINFO totals, Xing
// counts, Ogg granules and pre-skips, WAV data sizes, WebM Durations and timecodes), garbage
// between frames or pages or blocks, and cut short anywhere. The answer is a length at least
// what the whole frames before the cut hold (less only what the codec lets a stream trim: Opus
// pre-skip and one packet, Vorbis half a long block, Matroska's CodecDelay), or 400
// invalid_value with param file; never another error, never a hang. The oracle counts the
// frames from what the test put in, not from the gateway's walkers.

import t from 'tap';
import fc from 'fast-check';
import { GatewayError } from '../../lib/errors.js';
import { audioSeconds } from '../../lib/dialects/audio/duration.js';
import { ebml, flacFrame, oggStream, opusHead, vorbisIdHeader, vorbisSetupHeader } from '../helpers/audio-files.js';
import { holds } from './arbitraries.js';

/** Rejects after `ms`: a walk that never ends is a failure, not a stuck test. */
function within<T>(p: Promise<T>, ms = 5000): Promise<T> {
  return Promise.race([p, new Promise<T>((_r, j) => setTimeout(() => j(new Error(`no answer within ${ms} ms`)), ms).unref())]);
}

/** A file made of parts, some of them frames worth `seconds`, cut at `cut` (a fraction of its length). */
interface Built { parts: Array<{ data: Buffer; seconds: number }>; cut: number | null; allowance: number }

/** Checks the property for one built file. */
async function check(b: Built): Promise<void> {
  const data = Buffer.concat(b.parts.map((p) => p.data));
  const end = b.cut === null ? data.length : Math.floor(b.cut * data.length);
  let at = 0;
  let whole = 0;
  for (const p of b.parts) {
    at += p.data.length;
    if (at <= end) whole += p.seconds;
  }
  let seconds: number;
  try {
    seconds = await within(audioSeconds(data.subarray(0, end)));
  } catch (err) {
    if (err instanceof GatewayError && err.status === 400 && err.code === 'invalid_value' && err.param === 'file') return;
    throw err;
  }
  if (!Number.isFinite(seconds) || seconds <= 0) throw new Error(`a length of ${seconds}`);
  if (seconds < whole - b.allowance - 1e-9) throw new Error(`${seconds} s charged; the whole frames hold ${whole} s`);
}

const garbage = fc.option(fc.uint8Array({ minLength: 1, maxLength: 48 }).map((a) => Buffer.from(a)), { freq: 4 });
const cut = fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { freq: 3 });
const none = (data: Buffer) => ({ data, seconds: 0 });

t.test('FLAC: STREAMINFO that lies, garbage between frames, cut short', async (t) => {
  const arb = fc.record({
    rate: fc.constantFrom(8000, 44100, 48000, 96000),
    channels: fc.integer({ min: 1, max: 2 }),
    claim: fc.integer({ min: 0, max: 2 ** 32 - 1 }),
    frames: fc.array(fc.record({ fixed: fc.boolean(), blockSize: fc.constantFrom(192, 1152, 4096, 65535), gap: garbage }), { minLength: 1, maxLength: 30 }),
    cut,
  });
  await holds(t, 'lying FLAC', fc.asyncProperty(arb, async (f) => {
    const info = Buffer.alloc(34);
    info.writeUInt32BE(((f.rate << 12) | ((f.channels - 1) << 9) | (15 << 4)) >>> 0, 10);
    info.writeUInt32BE(f.claim >>> 0, 14);
    const parts = [none(Buffer.concat([Buffer.from('fLaC'), Buffer.from([0x80, 0, 0, 34]), info]))];
    f.frames.forEach((x, i) => {
      if (x.gap !== null) parts.push(none(x.gap));
      const size = x.fixed ? Math.min(x.blockSize, 4096) : x.blockSize;
      parts.push({ data: flacFrame(i, size, f.channels, x.fixed ? 'fixed' : 'constant', i), seconds: size / f.rate });
    });
    await check({ parts, cut: f.cut, allowance: 0 });
  }), 150);
});

/** MPEG-1 Layer III 128 kbit/s at 44.1 kHz (417 bytes) or MPEG-2.5 Layer III 8 kbit/s at 8 kHz (72 bytes). */
const MPEG = [{ header: 0xfffb9004, length: 417, seconds: 1152 / 44100 }, { header: 0xffe318c0, length: 72, seconds: 576 / 8000 }];

t.test('MP3: a Xing header that lies, ID3v2, garbage between frames, cut short', async (t) => {
  const arb = fc.record({
    kind: fc.constantFrom(0, 1),
    claim: fc.integer({ min: 0, max: 2 ** 32 - 1 }),
    id3: fc.boolean(),
    frames: fc.array(garbage, { minLength: 1, maxLength: 60 }),
    cut,
  });
  await holds(t, 'lying MP3', fc.asyncProperty(arb, async (m) => {
    const kind = MPEG[m.kind]!;
    const frame = Buffer.alloc(kind.length);
    frame.writeUInt32BE(kind.header, 0);
    const xing = Buffer.from(frame);
    xing.write('Xing', 4 + (m.kind === 0 ? 32 : 9), 'latin1');
    xing.writeUInt32BE(1, 8 + (m.kind === 0 ? 32 : 9));
    xing.writeUInt32BE(m.claim >>> 0, 12 + (m.kind === 0 ? 32 : 9));
    const parts = m.id3 ? [none(Buffer.concat([Buffer.from([0x49, 0x44, 0x33, 3, 0, 0, 0, 0, 0, 64]), Buffer.alloc(64, 0xff)]))] : [];
    parts.push(none(xing));
    for (const gap of m.frames) {
      if (gap !== null) parts.push(none(gap));
      parts.push({ data: frame, seconds: kind.seconds });
    }
    await check({ parts, cut: m.cut, allowance: 0 });
  }), 150);
});

/** Samples of an Opus packet (RFC 6716 §3.1), computed here from the TOC alone. */
function opusSamples(packet: Buffer): number {
  if (packet.length === 0) return 0;
  const c = packet[0]! >> 3;
  const size = c < 12 ? [480, 960, 1920, 2880][c & 3]! : c < 16 ? [480, 960][c & 1]! : [120, 240, 480, 960][c & 3]!;
  const n = (packet[0]! & 3) === 0 ? 1 : (packet[0]! & 3) < 3 ? 2 : packet.length < 2 ? 0 : packet[1]! & 63;
  return Math.min(5760, n * size);
}

t.test('Ogg Opus and Vorbis: granules and pre-skips that lie, garbage between pages, cut short', async (t) => {
  const arb = fc.record({
    vorbis: fc.boolean(),
    preSkip: fc.integer({ min: 0, max: 65535 }),
    packets: fc.array(fc.uint8Array({ minLength: 0, maxLength: 4 }).map((a) => Buffer.from(a)), { minLength: 1, maxLength: 200 }),
    granules: fc.array(fc.bigInt({ min: -1n, max: 2n ** 40n }), { minLength: 1, maxLength: 8 }),
    gaps: fc.array(garbage, { maxLength: 8 }),
    cut,
  });
  await holds(t, 'lying Ogg', fc.asyncProperty(arb, async (o) => {
    let pages: Buffer[];
    const seconds: number[] = [];
    const granule = (page: number) => o.granules[page % o.granules.length]!;
    if (o.vorbis) {
      // Audio packets: the first bit 0, the mode bit from the generated byte (0: short 256, 1: long 2048).
      const audio = o.packets.map((p) => Buffer.from([(p[0] ?? 0) & 2]));
      pages = oggStream(7, [vorbisIdHeader(8000), Buffer.concat([Buffer.from([3]), Buffer.from('vorbis'), Buffer.alloc(8), Buffer.from([1])]), vorbisSetupHeader(), ...audio], granule, 25, 3);
      let previous = 0;
      const per = audio.map((p) => { const size = p[0] ? 2048 : 256; const n = previous ? (previous + size) / 4 : 0; previous = size; return n / 8000; });
      seconds.push(0, 0, 0, ...chunk(per, 25).map((c) => c.reduce((a, b) => a + b, 0)));
    } else {
      pages = oggStream(7, [opusHead(o.preSkip), Buffer.from('OpusTags\0\0\0\0\0\0\0\0'), ...o.packets], granule, 25, 2);
      seconds.push(0, 0, ...chunk(o.packets, 25).map((c) => c.reduce((a, p) => a + opusSamples(p), 0) / 48000));
    }
    const parts = pages.map((data, i) => ({ data, seconds: seconds[i] ?? 0 }));
    o.gaps.forEach((gap, i) => { if (gap !== null) parts.splice(Math.min(parts.length, 1 + i * 2), 0, none(gap)); });
    await check({ parts, cut: o.cut, allowance: o.vorbis ? 1024 / 8000 : (o.preSkip + 5760) / 48000 });
  }), 150);
});

function chunk<T>(a: T[], n: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < a.length; i += n) out.push(a.slice(i, i + n));
  return out;
}

t.test('WAV: data sizes that lie either way, garbage after, cut short', async (t) => {
  const arb = fc.record({
    rate: fc.constantFrom(8000, 16000, 44100),
    channels: fc.integer({ min: 1, max: 2 }),
    bits: fc.constantFrom(8, 16, 24),
    bytes: fc.integer({ min: 1, max: 40_000 }),
    dataSize: fc.option(fc.integer({ min: 0, max: 0xffffffff })),
    tail: garbage,
    cut,
  });
  await holds(t, 'lying WAV', fc.asyncProperty(arb, async (w) => {
    const frame = w.channels * (w.bits / 8);
    const fmt = Buffer.alloc(24);
    fmt.write('fmt ', 0, 'latin1');
    fmt.writeUInt32LE(16, 4);
    fmt.writeUInt16LE(1, 8);
    fmt.writeUInt16LE(w.channels, 10);
    fmt.writeUInt32LE(w.rate, 12);
    fmt.writeUInt32LE(w.rate * frame, 16);
    fmt.writeUInt16LE(frame, 20);
    fmt.writeUInt16LE(w.bits, 22);
    const head = Buffer.alloc(8);
    head.write('data', 0, 'latin1');
    head.writeUInt32LE((w.dataSize ?? w.bytes) >>> 0, 4);
    const parts = [none(Buffer.concat([Buffer.from('RIFF\0\0\0\0WAVE'), fmt, head]))];
    // Each sample frame is a part: a cut keeps the whole frames before it.
    const frames = Math.floor(w.bytes / frame);
    const samples = Buffer.alloc(frames * frame, 0x41);
    for (let i = 0; i < frames; i += 64) {
      const n = Math.min(64, frames - i);
      parts.push({ data: samples.subarray(i * frame, (i + n) * frame), seconds: n / w.rate });
    }
    if (w.tail !== null) parts.push(none(w.tail));
    // A data size that stops short of samples followed by well-formed chunks is taken as said.
    const declared = w.dataSize === null ? frames * frame : w.dataSize;
    await check({ parts, cut: w.cut, allowance: declared < frames * frame && declared > 0 ? (frames * frame - declared) / frame / w.rate : 0 });
  }), 150);
});

t.test('WebM: Durations and timecodes that lie, lacing, garbage between blocks, cut short', async (t) => {
  const arb = fc.record({
    claimMs: fc.double({ min: 0, max: 1e9, noNaN: true }),
    blocks: fc.array(fc.record({ packets: fc.array(fc.uint8Array({ minLength: 1, maxLength: 3 }).map((a) => Buffer.from(a)), { minLength: 1, maxLength: 4 }), lacing: fc.constantFrom(1, 2, 3), timecode: fc.integer({ min: -32768, max: 32767 }), gap: garbage }), { minLength: 1, maxLength: 40 }),
    unknownSizes: fc.boolean(),
    cut,
  });
  await holds(t, 'lying WebM', fc.asyncProperty(arb, async (w) => {
    const u = (id: number, v: number) => ebml(id, Buffer.from([v >> 8, v & 0xff]));
    const info = ebml(0x1549a966, [u(0x2ad7b1, 1000), ebml(0x4489, (() => { const b = Buffer.alloc(8); b.writeDoubleBE(w.claimMs); return b; })())]);
    const entry = ebml(0xae, [u(0xd7, 1), u(0x83, 2), ebml(0x86, Buffer.from('A_OPUS')), ebml(0x63a2, opusHead(0)), ebml(0xe1, ebml(0xb5, Buffer.from([0x47, 0x3b, 0x80, 0])))]);
    // The Segment's size is written as unknown: its parts are cut and spliced freely.
    const segment = Buffer.from([0x18, 0x53, 0x80, 0x67, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    const parts = [none(Buffer.concat([ebml(0x1a45dfa3, ebml(0x4282, Buffer.from('webm'))), segment, info, ebml(0x1654ae6b, entry)]))];
    for (const b of w.blocks) {
      if (b.gap !== null) parts.push(none(b.gap));
      // Fixed lacing needs frames of one size: the packets padded to the longest.
      const n = b.packets.length;
      const longest = Math.max(...b.packets.map((p) => p.length));
      const frames = b.lacing === 2 ? b.packets.map((p) => Buffer.concat([p, Buffer.alloc(longest - p.length)])) : b.packets;
      let lace = Buffer.alloc(0);
      if (n > 1 && b.lacing === 1) lace = Buffer.from([n - 1, ...frames.slice(0, -1).map((p) => p.length)]);
      if (n > 1 && b.lacing === 2) lace = Buffer.from([n - 1]);
      if (n > 1 && b.lacing === 3) lace = Buffer.from([n - 1, 0x80 | frames[0]!.length, ...frames.slice(1, -1).map((p, i) => 0x80 | (p.length - frames[i]!.length + 63))]);
      const flags = 0x80 | (n > 1 ? b.lacing << 1 : 0);
      const block = ebml(0xa3, [Buffer.from([0x81, (b.timecode >> 8) & 0xff, b.timecode & 0xff, flags]), lace, ...frames]);
      parts.push({ data: ebml(0x1f43b675, [ebml(0xe7, Buffer.from([0])), block], w.unknownSizes), seconds: frames.reduce((a, p) => a + opusSamples(p), 0) / 48000 });
    }
    await check({ parts, cut: w.cut, allowance: 0 });
  }), 150);
});
