// Ogg measured by its packets: pages are read one after another (27-byte header, lacing
// table, body), packets put together from their lacing values across pages, and each logical
// stream's audio packets counted by its codec: Opus by each packet's TOC (opus.ts), Vorbis by
// the block sizes its setup header gives each mode (vorbis.ts), FLAC by each frame's header.
// A granule position is a header field: the last one is used only to trim the end (as the
// codec's spec allows) by less than one packet (Opus: 120 ms; Vorbis: half a long block) of the
// last page's own samples; otherwise the packets are the length. Opus's pre-skip is taken off. Streams of other codecs are refused, except
// video, subtitles and skeletons, which hold no audio and are left out. Streams side by side
// in one link (all their first pages come first) are charged the longest; chained links one
// after another are added up. Bytes that are not a page are searched through for the next
// `OggS`; page CRCs are not checked (a page that fails one can only add to the count). A page
// of a serial whose first page is not in its link continues the stream of that serial, or
// else the last audio stream (ffmpeg gives a lone stream a page's new serial so).

import { type FlacInfo } from './flac-frame.js';
import { countFlacFrames, streamInfo } from './flac.js';
import { opusHead, opusPacketSamples } from './opus.js';
import { vorbisId, vorbisModes, VorbisPackets, type VorbisId } from './vorbis.js';
import { OPUS_MAX_PACKET_SAMPLES, OPUS_RATE, Tally, unreadable, type Walk, YIELD_WORK } from './walk.js';

/** How much of an audio packet is kept to read it (its TOC, its frame header). */
const KEEP = 24;
/** The most logical streams read in one file (a recording has one or two). */
const MAX_STREAMS = 64;
/** The largest header packet read whole, at once (a Vorbis setup header is a few kilobytes). */
const MAX_HEADER = 256 * 1024;

/** First bytes of the streams that hold no audio. */
const NOT_AUDIO = ['\x80theora', 'fishead\0', 'fisbone\0', '\x80kate', 'BBCD\0', '\x80daala', 'CMML\0\0\0\0', 'index\0'];

interface Stream {
  kind: 'opus' | 'vorbis' | 'flac' | 'none';
  /** Packets completed so far (the first ones are headers). */
  packets: number;
  /** The packet being put together: its kept bytes and its full length. */
  parts: Buffer[];
  kept: number;
  length: number;
  open: boolean;
  samples: number;
  frames: Tally;
  preSkip: number;
  vorbis?: { id: VorbisId; packets?: VorbisPackets };
  flac?: FlacInfo;
  /** The last granule position, the samples then, and those of the packets of that page. */
  granule: number;
  atGranule: number;
  onGranulePage: number;
}

function newStream(): Stream {
  return {
    kind: 'none', packets: 0, parts: [], kept: 0, length: 0, open: false, samples: 0, frames: new Tally(), preSkip: 0,
    granule: -1, atGranule: -1, onGranulePage: 0,
  };
}

/** Reads a finished packet (its first bytes, or all of a header); returns the samples it holds. */
function packet(s: Stream, data: Buffer, length: number): number {
  const index = s.packets++;
  if (index === 0) {
    const text = data.subarray(0, 9).toString('latin1');
    const preSkip = opusHead(data);
    const vid = vorbisId(data);
    if (preSkip !== undefined) {
      s.kind = 'opus';
      s.preSkip = preSkip;
    } else if (vid !== undefined) {
      s.kind = 'vorbis';
      s.vorbis = { id: vid };
    } else if (data.length >= 51 && text.startsWith('\x7fFLAC') && data.subarray(9, 13).toString('latin1') === 'fLaC') {
      s.kind = 'flac';
      s.flac = streamInfo(data, 17);
    } else if (!NOT_AUDIO.some((m) => text.startsWith(m.slice(0, 9)))) {
      throw unreadable('an Ogg stream of a codec this gateway does not read (it reads Opus, Vorbis and FLAC)');
    }
    return 0;
  }
  if (s.kind === 'opus') return index >= 2 ? opusPacketSamples(data, 0, length) : 0;
  if (s.kind === 'vorbis') {
    const v = s.vorbis!;
    if (index === 2) {
      const modes = vorbisModes(data, v.id);
      if (modes === undefined) throw unreadable('a Vorbis setup header that cannot be read');
      v.packets = new VorbisPackets(v.id, modes);
      return 0;
    }
    return index > 2 && v.packets !== undefined ? v.packets.samples(data, 0, length) : 0;
  }
  if (s.kind === 'flac' && data[0] === 0xff) countFlacFrames(data.subarray(0, length), s.flac!, s.frames);
  return 0;
}

/** The stream's next packet is an Opus or Vorbis audio packet (its headers read). */
function audioPacket(s: Stream): boolean {
  return (s.kind === 'opus' && s.packets >= 2) || (s.kind === 'vorbis' && s.packets >= 3 && s.vorbis!.packets !== undefined);
}

function wantsWhole(s: Stream): boolean {
  return s.packets === 0 || (s.kind === 'vorbis' && s.packets === 2) || s.kind === 'flac';
}

function append(s: Stream, b: Buffer, from: number, to: number): void {
  const limit = wantsWhole(s) ? MAX_HEADER : KEEP;
  if (s.kept < limit && to > from) {
    const take = b.subarray(from, Math.min(to, from + limit - s.kept));
    s.parts.push(take);
    s.kept += take.length;
  }
  s.length += to - from;
  if (s.length > MAX_HEADER && wantsWhole(s)) throw unreadable('an Ogg header or FLAC packet larger than 256 KiB');
}

/** Finishes the packet being put together. */
function close(s: Stream): number {
  const data = s.parts.length === 1 ? s.parts[0]! : Buffer.concat(s.parts);
  const samples = packet(s, data, s.length);
  s.parts = [];
  s.kept = 0;
  s.length = 0;
  s.open = false;
  s.samples += samples;
  return samples;
}

/** A stream's length in seconds: its packets, the end trimmed by the last granule when that agrees. */
function seconds(s: Stream): number {
  if (s.kind === 'flac') return s.frames.seconds;
  if (s.kind === 'none') return 0;
  let n = s.samples;
  const rate = s.kind === 'opus' ? OPUS_RATE : s.vorbis!.id.rate;
  // An encoder trims less than one packet (Opus: at most 120 ms; Vorbis: half a long block).
  const trim = Math.min(s.onGranulePage, s.kind === 'opus' ? OPUS_MAX_PACKET_SAMPLES : s.vorbis!.id.long / 2);
  if (s.atGranule === n && s.granule >= 0 && s.granule <= n && s.granule >= n - trim) n = s.granule;
  return Math.max(0, n - s.preSkip) / rate;
}

/** The audio stream begun last, if any. */
function lastAudio(links: Array<Map<number, Stream>>): Stream | undefined {
  for (let i = links.length - 1; i >= 0; i--) {
    const all = [...links[i]!.values()];
    for (let j = all.length - 1; j >= 0; j--) if (all[j]!.kind !== 'none') return all[j];
  }
  return undefined;
}

/** The Ogg file whose first page is at `start`: its length in seconds. */
export function* walkOgg(b: Buffer, start: number): Walk<number> {
  let work = 0;
  const links: Array<Map<number, Stream>> = [new Map()];
  const bySerial = new Map<number, Stream>();
  let started = false;
  let streams = 0;
  let p = start;
  while (p + 27 <= b.length) {
    if (b.readUInt32BE(p) !== 0x4f676753 || b[p + 4] !== 0) {
      const q = b.indexOf('OggS', p + 1, 'latin1');
      const next = q === -1 ? b.length : q;
      if ((work += next - p + 1) >= YIELD_WORK) {
        yield work;
        work = 0;
      }
      p = next;
      continue;
    }
    const flags = b[p + 5]!;
    const lo = b.readUInt32LE(p + 6), hi = b.readUInt32LE(p + 10);
    const granule = hi === 0xffffffff && lo === 0xffffffff ? -1 : hi < 0x200000 ? hi * 2 ** 32 + lo : Number.MAX_SAFE_INTEGER;
    const serial = b.readUInt32LE(p + 14);
    const count = b[p + 26]!;
    const table = p + 27;
    if (table + count > b.length) break;
    let link = links[links.length - 1]!;
    let s: Stream | undefined = link.get(serial);
    if ((flags & 2) !== 0) {
      if (s !== undefined || started) {
        links.push((link = new Map()));
        started = false;
      }
      if (++streams > MAX_STREAMS) throw unreadable(`more than ${MAX_STREAMS} Ogg streams`);
      link.set(serial, (s = newStream()));
      bySerial.set(serial, s);
    } else {
      // A page of a stream whose first page was not in this link: the stream of that serial
      // before, or else the last audio stream (ffmpeg gives a lone stream a new serial so).
      s ??= bySerial.get(serial) ?? lastAudio(links);
      started = true;
    }
    let at = table + count;
    if (s !== undefined) {
      // A page that does not continue a packet ends the one left open (cut short: counted as it is).
      let skipping = (flags & 1) !== 0 && !s.open;
      if ((flags & 1) === 0 && s.open) close(s);
      let onPage = 0;
      for (let i = 0; i < count && at < b.length; i++) {
        const lace = b[table + i]!;
        const to = Math.min(b.length, at + lace);
        if (!skipping && !s.open && lace < 255 && audioPacket(s)) {
          // A whole audio packet on this page (nearly all are): read where it is.
          const n = s.kind === 'opus' ? opusPacketSamples(b, at, to - at) : s.vorbis!.packets!.samples(b, at, to - at);
          s.packets++;
          s.samples += n;
          onPage += n;
        } else if (!skipping) {
          append(s, b, at, to);
          s.open = true;
          if (lace < 255) onPage += close(s);
        } else if (lace < 255) skipping = false;
        at = to;
      }
      if (granule !== -1) {
        s.granule = granule;
        s.atGranule = s.samples;
        s.onGranulePage = onPage;
      }
    } else for (let i = 0; i < count; i++) at += b[table + i]!;
    if ((work += at - p + 1) >= YIELD_WORK) {
      yield work;
      work = 0;
    }
    p = Math.min(at, b.length);
  }
  let total = 0;
  let audio = false;
  for (const link of links) {
    let longest = 0;
    for (const s of link.values()) {
      if (s.open) close(s);
      if (s.kind !== 'none') audio = true;
      longest = Math.max(longest, seconds(s));
    }
    total += longest;
  }
  if (!audio) throw unreadable('no audio stream in this Ogg file');
  return total;
}
