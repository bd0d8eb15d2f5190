// How long an uploaded audio file plays, read before the upstream is called: what an audio
// request is held and charged for. The file's own headers are read by a maintained parser
// (music-metadata: WAV, MP3, FLAC, Ogg, WebM and more); but a header can lie, so the length is
// never taken below the file's size over the most bytes a second its format can carry. A file
// that claims one second while its bytes would play for ten minutes is charged ten minutes.

import { badValue } from '../../schema/params.js';

/**
 * The parser, loaded by the first audio request: a gateway that serves none never loads it (with
 * its readers, about 2.4 MB of heap; test/cli/idle-modules.test.ts).
 */
let musicMetadata: Promise<typeof import('music-metadata')> | undefined;

/**
 * The most bytes one second of audio takes, by format: lossless and PCM at 48 kHz, stereo,
 * 16-bit (a denser file, hi-res say, is charged as if it played at this rate); MPEG Layer III at
 * 320 kbit/s, its highest; Layers I and II at 448 kbit/s; anything else compressed (Opus, Vorbis,
 * AAC: at most about 510 kbit/s) at 64,000 bytes a second.
 */
export const MAX_BYTES_PER_SECOND = { pcm: 192_000, mp3: 40_000, mpeg: 56_000, compressed: 64_000 } as const;

/** The densest a file of this format can be, in bytes per second. */
export function maxBytesPerSecond(container: string | undefined, codec: string | undefined, lossless: boolean | undefined): number {
  const c = (container ?? '').toLowerCase();
  const k = (codec ?? '').toLowerCase();
  if (lossless === true || c === 'wave' || c === 'flac' || c.startsWith('aiff') || k.includes('pcm')) return MAX_BYTES_PER_SECOND.pcm;
  if (k.includes('layer 3') || k === 'mp3') return MAX_BYTES_PER_SECOND.mp3;
  if (c === 'mpeg' || k.startsWith('mpeg')) return MAX_BYTES_PER_SECOND.mpeg;
  return MAX_BYTES_PER_SECOND.compressed;
}

function unreadable(why: string) {
  return badValue('file', `could not read the audio's length (${why}); send WAV, MP3, FLAC, OGG or WebM`);
}

/**
 * The file's length in seconds, at least its bytes over its format's densest rate. An
 * unrecognized or unreadable file is 400 invalid_value, param file.
 */
export async function audioSeconds(data: Buffer): Promise<number> {
  const { parseBuffer } = await (musicMetadata ??= import('music-metadata'));
  let format;
  try {
    // The client's file name and media type are not trusted: the content says what it is.
    format = (await parseBuffer(data, { size: data.length }, { duration: true, skipCovers: true })).format;
  } catch {
    throw unreadable('not an audio file this gateway reads');
  }
  const duration = format.duration;
  if (format.container === undefined || duration === undefined || !Number.isFinite(duration) || duration < 0) {
    throw unreadable('no length in its headers');
  }
  return Math.max(duration, data.length / maxBytesPerSecond(format.container, format.codec, format.lossless));
}
