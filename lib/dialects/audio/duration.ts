// How long an uploaded audio file plays, read before the upstream is called: what an audio
// request is held and charged for (CONTRACT §14, §21). The length is the stream's own, counted
// from its frames, never a header field (a FLAC STREAMINFO total, a Xing frame count, an Ogg
// granule, a Matroska Duration or timecode, a WAV data size) that the frames contradict. The
// format is told by the content (the client's file name and media type are not trusted), and
// each has its frame walker: wav.ts, mpeg.ts, flac.ts, ogg.ts, matroska.ts. The walk runs in
// slices that hand the event loop back (walk.ts), in time linear in the file, on the buffer the
// route already holds. A file no walker reads, or that holds no audio, is 400 invalid_value,
// param file.

import { walkFlac } from './flac.js';
import { walkMatroska } from './matroska.js';
import { mpegHeader, mpegStartsAt, walkMpeg } from './mpeg.js';
import { walkOgg } from './ogg.js';
import { walkWav } from './wav.js';
import { drive, skipId3v2, Tally, unreadable, type Walk } from './walk.js';

/** Bytes of zeros after ID3v2 tags that are still taken as padding before MPEG frames. */
const MAX_PADDING = 64 * 1024;

function* walkAudio(b: Buffer): Walk<number> {
  const head = b.toString('latin1', 0, 4);
  if ((head === 'RIFF' || head === 'RF64' || head === 'BW64') && b.toString('latin1', 8, 12) === 'WAVE') return yield* walkWav(b);
  if (head === 'OggS') return yield* walkOgg(b, 0);
  if (b.length >= 4 && b.readUInt32BE(0) === 0x1a45dfa3) return yield* walkMatroska(b, 0);
  let p = skipId3v2(b, 0);
  if (b.toString('latin1', p, p + 4) === 'fLaC') return (yield* walkFlac(b, p)).seconds;
  // After an ID3v2 tag, one frame header is enough to say MPEG; without one, a second must follow.
  const tagged = p > 0;
  for (const stop = Math.min(b.length, p + MAX_PADDING); tagged && p < stop && b[p] === 0;) p++;
  if (tagged ? mpegHeader(b, p) !== undefined : mpegStartsAt(b, p)) {
    const tally = new Tally();
    yield* walkMpeg(b, p, b.length, tally, true);
    return tally.seconds;
  }
  throw unreadable('not an audio file this gateway reads');
}

/** The file's length in seconds, from its frames; 400 invalid_value (param file) when it has none. */
export async function audioSeconds(data: Buffer): Promise<number> {
  const seconds = await drive(walkAudio(data));
  if (!Number.isFinite(seconds) || seconds <= 0) throw unreadable('it holds no audio');
  return seconds;
}
