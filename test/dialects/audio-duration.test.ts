// The audio length the gateway charges (lib/dialects/audio/duration.ts and its frame walkers),
// read from the frames of files made here: truthful files of every format measured exactly;
// files whose headers claim one second while their frames hold minutes (a FLAC STREAMINFO, a
// Xing header, an Ogg granule, a WebM Duration and timecodes, a WAV data size) measured by
// their frames; and the edges decided in the walkers' header comments: ID3v2 tags, garbage
// between frames, last frames cut short, frames hidden in a frame, pre-skip and end trims,
// chained and side-by-side streams, lacing, compressed WAV, unknown codecs refused 400.

import t from 'tap';
import { GatewayError } from '../../lib/errors.js';
import { audioSeconds } from '../../lib/dialects/audio/duration.js';
import {
  crc8, DENSE_MP3_FRAME_SECONDS, ebml, flac, flacFrame, mp3Xing, oggOpus, oggStream, oggVorbis, opusHead, riffChunk, wavFile, webmOpus,
} from '../helpers/audio-files.js';
import { mp3, wav } from '../helpers/audio.js';

const close = (t: any, got: number, want: number, what: string) => t.ok(Math.abs(got - want) < 1e-6, `${what}: ${got} s, want ${want} s`);

async function refused(t: any, data: Buffer, why: RegExp, what: string): Promise<void> {
  const err = await audioSeconds(data).then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof GatewayError, `${what}: a GatewayError`);
  t.match(err, { status: 400, code: 'invalid_value', param: 'file', message: why }, what);
}

t.test('truthful files of each format: their exact length', async (t) => {
  close(t, await audioSeconds(wav(2)), 2, 'WAV PCM 16 kHz');
  close(t, await audioSeconds(mp3(100)), (100 * 1152) / 44100, 'MP3, MPEG-1 Layer III');
  const f = flac({ frames: 30, blockSize: 4096, rate: 44100, channels: 2 });
  close(t, await audioSeconds(f.data), f.seconds, 'FLAC, constant subframes');
  const rice = flac({ frames: 12, blockSize: 1152, rate: 16000, subframe: 'fixed' });
  close(t, await audioSeconds(rice.data), rice.seconds, 'FLAC, fixed subframes with Rice-coded residuals');
  const opus = oggOpus(200, 0xf8);
  close(t, await audioSeconds(opus.data), opus.seconds, 'Ogg Opus (pre-skip off)');
  const vorbis = oggVorbis(100, 16000);
  close(t, await audioSeconds(vorbis.data), vorbis.seconds, 'Ogg Vorbis');
  const webm = webmOpus({ blocks: 150 });
  close(t, await audioSeconds(webm.data), webm.seconds, 'WebM Opus');
  const x = mp3Xing(300, 300);
  close(t, await audioSeconds(x.data), x.seconds, 'MP3 whose Xing header tells the truth (that frame is silence, not counted)');
});

t.test('headers that claim one second: the frames are the length', async (t) => {
  const f = flac({ frames: 2000, blockSize: 65535, claimSamples: 48000 });
  t.ok(f.seconds > 2700, 'the FLAC frames hold 45 minutes');
  close(t, await audioSeconds(f.data), f.seconds, 'FLAC STREAMINFO says 1 s');
  const m = mp3Xing(5000, 14);
  close(t, await audioSeconds(m.data), m.seconds, 'MP3 Xing says 14 frames');
  const o = oggOpus(6000, 0x18, 48000);
  close(t, await audioSeconds(o.data), o.seconds, 'Ogg Opus last granule says 1 s');
  const v = oggVorbis(3000, 8000, 8000);
  close(t, await audioSeconds(v.data), v.seconds, 'Ogg Vorbis last granule says 1 s');
  const w = wavFile(600_000, { dataSize: 8000 });
  close(t, await audioSeconds(w.data), w.seconds, 'WAV data chunk says 1 s, its samples run to the end');
  const web = webmOpus({ blocks: 3000, claimMs: 1000, zeroTimecodes: true });
  close(t, await audioSeconds(web.data), web.seconds, 'WebM Duration 1 s, every timecode 0');
});

t.test('headers that claim more than the frames hold: the frames, not the claim', async (t) => {
  const f = flac({ frames: 10, claimSamples: 48000 * 3600 });
  close(t, await audioSeconds(f.data), f.seconds, 'FLAC STREAMINFO says an hour');
  const w = wavFile(16_000, { dataSize: 0x7fffffff });
  close(t, await audioSeconds(w.data), 2, 'WAV data size past the end of the file');
  const web = webmOpus({ blocks: 40, claimMs: 3_600_000 });
  close(t, await audioSeconds(web.data), web.seconds, 'WebM Duration an hour');
  const o = oggOpus(100, 0xf8, 48000 * 3600);
  close(t, await audioSeconds(o.data), o.seconds, 'Ogg granule an hour');
});

t.test('FLAC: tags, garbage, cut frames, hidden frames', async (t) => {
  const tagged = flac({ frames: 20, id3: true });
  close(t, await audioSeconds(tagged.data), tagged.seconds, 'after an ID3v2 tag');
  const noisy = flac({ frames: 40, between: (i) => (i % 3 === 1 ? Buffer.from([0xff, 0xf8, 0x12, 0x34, 0x00, 0x99, 0xff, 0x00, 7, 7]) : undefined) });
  close(t, await audioSeconds(noisy.data), noisy.seconds, 'garbage with false sync codes between frames is skipped');
  const whole = flac({ frames: 10, subframe: 'fixed', blockSize: 2048 });
  const cut = whole.data.subarray(0, whole.data.length - 100);
  close(t, await audioSeconds(cut), whole.seconds, 'a last frame cut short is counted whole');
  // A verbatim frame whose samples are 40 constant frames: ffmpeg finds frames by their headers.
  const inner = Buffer.concat(Array.from({ length: 40 }, (_, i) => flacFrame(i + 1, 4096, 1, 'constant', 1)));
  const blockSize = Math.ceil(inner.length / 2);
  const head = Buffer.from([0xff, 0xf8, 7 << 4, 4 << 1, 0, (blockSize - 1) >> 8, (blockSize - 1) & 0xff]);
  const verbatim = Buffer.concat([head, Buffer.from([crc8(head), 0x02]), inner, Buffer.alloc(blockSize * 2 - inner.length), Buffer.alloc(2)]);
  const base = flac({ frames: 1 });
  const hiding = Buffer.concat([base.data.subarray(0, 42), verbatim]);
  close(t, await audioSeconds(hiding), (40 * 4096) / 48000, 'a frame hiding 40 frames in its samples is charged for them');
  await refused(t, Buffer.concat([Buffer.from('fLaC'), Buffer.from([0x80, 0, 0, 34]), Buffer.alloc(10)]), /STREAMINFO/, 'a STREAMINFO cut short');
  await refused(t, base.data.subarray(0, 42), /holds no audio/, 'no frames at all');
});

t.test('MP3: tags, garbage, cut frames, free format', async (t) => {
  const tagged = mp3Xing(50, 50, true);
  close(t, await audioSeconds(tagged.data), tagged.seconds, 'an ID3v2 tag of 0xFF bytes is skipped by its size, not read as frames');
  const frames = mp3(60);
  const junk = Buffer.concat([frames.subarray(0, 417 * 20), Buffer.from('APETAGEX junk between frames'), frames.subarray(417 * 20)]);
  close(t, await audioSeconds(junk), (60 * 1152) / 44100, 'garbage between frames');
  close(t, await audioSeconds(frames.subarray(0, frames.length - 300)), (60 * 1152) / 44100, 'a last frame cut short counts');
  const free = mp3(10);
  for (let i = 0; i < 10; i++) free[i * 417 + 2] = 0x00 | (free[i * 417 + 2]! & 0x0f);
  close(t, await audioSeconds(free), (10 * 1152) / 44100, 'free-format frames (no bitrate): each runs to the next header');
  close(t, await audioSeconds(mp3Xing(1, 1).data), 0.072, 'one frame after the Xing frame');
  t.equal(DENSE_MP3_FRAME_SECONDS, 0.072);
});

t.test('Ogg: trims, pre-skip, links, streams side by side, codecs', async (t) => {
  // The last granule trims 300 samples of the last page's: the codec's end trim, taken.
  const trimmed = oggOpus(100, 0xf8, 100 * 960 - 312 - 300);
  close(t, await audioSeconds(trimmed.data), (100 * 960 - 312 - 300) / 48000, 'an end trim within the last page is taken');
  const a = oggOpus(100, 0xf8), b = oggOpus(50, 0x18);
  close(t, await audioSeconds(Buffer.concat([a.data, b.data])), a.seconds + b.seconds, 'chained links add up');
  // Two streams side by side: their first pages first, then their pages interleaved.
  const pa = oggStream(1, [opusHead(0), Buffer.from('OpusTags\0\0\0\0\0\0\0\0'), ...Array.from({ length: 100 }, () => Buffer.from([0xf8]))], () => 0n, 50, 2);
  const pb = oggStream(2, [opusHead(0), Buffer.from('OpusTags\0\0\0\0\0\0\0\0'), ...Array.from({ length: 300 }, () => Buffer.from([0xf8]))], () => 0n, 50, 2);
  const side = Buffer.concat([pa[0]!, pb[0]!, ...pa.slice(1), ...pb.slice(1)]);
  close(t, await audioSeconds(side), (300 * 960) / 48000, 'streams side by side: the longest');
  const third = a.data.indexOf('OggS', a.data.indexOf('OggS', 4) + 4);
  const noisy = Buffer.concat([a.data.subarray(0, third), Buffer.from('garbage, OggS-ish bytes'), a.data.subarray(third)]);
  close(t, await audioSeconds(noisy), a.seconds, 'garbage between pages is searched through');
  // A granule of 0 on a last page of 50 packets of 120 ms (6 s): more than one packet's trim is not taken.
  const code3 = Buffer.from([0x1b, 0x02]); // two 60 ms SILK frames
  const liar = oggStream(9, [opusHead(0), Buffer.from('OpusTags\0\0\0\0\0\0\0\0'), ...Array.from({ length: 50 }, () => code3)], () => 0n, 50, 2);
  close(t, await audioSeconds(Buffer.concat(liar)), 6, 'a granule that would trim the whole last page is not taken');
  // Pages of a serial whose first page never came (ffmpeg plays them as the lone stream's).
  const stray = oggStream(0x5151, [Buffer.from([0xf8]), ...Array.from({ length: 149 }, () => Buffer.from([0xf8]))], () => 0n, 50, 0)
    .map((page) => { const p = Buffer.from(page); p[5] = 0; return p; });
  close(t, await audioSeconds(Buffer.concat([a.data, ...stray])), a.seconds + 3, 'pages of an unseen serial continue the last audio stream');
  const flood = Buffer.concat(Array.from({ length: 100 }, (_, i) => oggStream(1000 + i, [opusHead(0)], () => 0n, 50, 1)[0]!));
  await refused(t, flood, /more than 64 Ogg streams/, 'a hundred streams');
  const speex = oggStream(3, [Buffer.concat([Buffer.from('Speex   '), Buffer.alloc(72)]), Buffer.alloc(10)], () => 0n, 50, 1);
  await refused(t, Buffer.concat(speex), /codec this gateway does not read/, 'Ogg Speex');
  const theora = oggStream(4, [Buffer.concat([Buffer.from('\x80theora', 'latin1'), Buffer.alloc(40)])], () => 0n, 50, 1);
  await refused(t, Buffer.concat(theora), /no audio stream/, 'Ogg video alone');
  const v = oggVorbis(10);
  const broken = Buffer.from(v.data);
  broken[broken.indexOf(Buffer.from([5, 0x76, 0x6f, 0x72, 0x62]), 0) + 7] = 7; // the codebook count
  await refused(t, broken, /Vorbis setup header/, 'a Vorbis setup header that cannot be read');
});

t.test('WAV: data sizes that lie, encodings', async (t) => {
  const list = riffChunk('LIST', Buffer.concat([Buffer.from('INFOISFT'), Buffer.from([6, 0, 0, 0]), Buffer.from('test\0\0')]));
  const honest = wavFile(16_000, { after: [list] });
  close(t, await audioSeconds(honest.data), 2, 'a LIST chunk after the data is not audio');
  const short = wavFile(16_000, { dataSize: 1000, after: [list] });
  close(t, await audioSeconds(short.data), (short.data.length - 44) / 8000, 'a short data size followed by samples: every byte to the end');
  const zero = wavFile(24_000, { dataSize: 0 });
  close(t, await audioSeconds(zero.data), 3, 'a data size of 0 (a streaming writer): to the end');
  close(t, await audioSeconds(wavFile(32_000, { format: 0xfffe, bits: 16, channels: 2, rate: 8000 }).data), 1, 'WAVE_FORMAT_EXTENSIBLE PCM');
  close(t, await audioSeconds(wavFile(64_000, { format: 3, bits: 32, rate: 16000 }).data), 1, 'IEEE float');
  close(t, await audioSeconds(wavFile(8000, { format: 7, bits: 8 }).data), 1, 'µ-law');
  close(t, await audioSeconds(wavFile(8000, { format: 0xfffe, subformat: 7, bits: 8 }).data), 1, 'µ-law as WAVE_FORMAT_EXTENSIBLE');
  // IMA ADPCM, 256-byte blocks, mono: 4 bytes of header (1 sample) and 252 of nibbles (504).
  close(t, await audioSeconds(wavFile(256 * 10, { format: 0x11, bits: 4, blockAlign: 256 }).data), (10 * 505) / 8000, 'IMA ADPCM');
  close(t, await audioSeconds(wavFile(256 * 10, { format: 2, bits: 4, blockAlign: 256 }).data), (10 * (2 + 249 * 2)) / 8000, 'Microsoft ADPCM');
  const mp3wav = wavFile(0, { format: 0x55 });
  const withFrames = Buffer.concat([mp3wav.data.subarray(0, mp3wav.data.length - 8), riffChunk('data', mp3(20))]);
  close(t, await audioSeconds(withFrames), (20 * 1152) / 44100, 'MPEG Layer III in WAV: its frames');
  await refused(t, wav(1, 16000, 4_000_000), /sample rate of 4000000 Hz/, 'a rate above 768 kHz');
  await refused(t, wavFile(100, { format: 0x31 }).data, /encoding 0x0031/, 'GSM 6.10');
  await refused(t, wavFile(100, { channels: 0 }).data, /no channels/, 'no channels');
  await refused(t, Buffer.concat([Buffer.from('RIFF\0\0\0\0WAVE'), riffChunk('data', Buffer.alloc(100))]), /fmt chunk/, 'no fmt chunk');
  await refused(t, wavFile(0).data, /holds no audio/, 'an empty data chunk');
});

t.test('WebM: lacing, unknown sizes, codec delay, codecs', async (t) => {
  for (const lacing of ['xiph', 'ebml', 'fixed'] as const) {
    const w = webmOpus({ blocks: 30, perBlock: 4, lacing });
    close(t, await audioSeconds(w.data), w.seconds, `${lacing} lacing`);
  }
  const live = webmOpus({ blocks: 250, unknownSizes: true });
  close(t, await audioSeconds(live.data), live.seconds, 'unknown-size Segment and Clusters (a live recording)');
  const delayed = webmOpus({ blocks: 100, codecDelayNs: 6_500_000 });
  close(t, await audioSeconds(delayed.data), delayed.seconds, 'CodecDelay taken off');
  const cut = webmOpus({ blocks: 100 });
  t.ok((await audioSeconds(cut.data.subarray(0, cut.data.length - 5))) >= (99 * 2880) / 48000 - 1e-9, 'a file cut inside its last block');
  const aac = Buffer.from(webmOpus({ blocks: 10 }).data);
  aac.write('A_XYZW', aac.indexOf('A_OPUS'), 'latin1');
  await refused(t, aac, /codec this gateway does not read \(A_XYZW\)/, 'an unknown codec');
  // A second track list after the clusters neither resets nor adds to what was counted.
  const twice = webmOpus({ blocks: 60 });
  const tracksAt = twice.data.indexOf(Buffer.from([0x16, 0x54, 0xae, 0x6b]));
  const tracksLen = 4 + 8 + Number(twice.data.readBigUInt64BE(tracksAt + 4) & ((1n << 56n) - 1n));
  close(t, await audioSeconds(Buffer.concat([twice.data, twice.data.subarray(tracksAt, tracksAt + tracksLen)])), twice.seconds, 'a second Tracks element');
  const noTracks = Buffer.concat([ebml(0x1a45dfa3, ebml(0x4282, Buffer.from('webm'))), ebml(0x18538067, ebml(0x1549a966, Buffer.alloc(0)))]);
  await refused(t, noTracks, /no audio track/, 'no audio track');
});

t.test('not audio, empty, random: 400 invalid_value, param file', async (t) => {
  await refused(t, Buffer.from('just some text, not audio at all'), /not an audio file/, 'text');
  await refused(t, Buffer.alloc(0), /not an audio file/, 'empty');
  close(t, await audioSeconds(Buffer.from([0xff, 0xfb, 0x90, 0x04])), 1152 / 44100, 'a lone MP3 frame header: a frame cut short, counted whole');
  await refused(t, Buffer.from([0xff, 0xfb, 0x90]), /not an audio file/, 'three bytes');
});

t.test('a 25 MiB file is measured in slices: the event loop turns while it is', async (t) => {
  const big = flac({ frames: 24 * 1024 * 1024 / 16, blockSize: 65535 });
  t.ok(big.data.length > 20 * 1024 * 1024, `${(big.data.length / 1048576).toFixed(1)} MiB`);
  let turns = 0;
  let on = true;
  const tick = () => { turns++; if (on) setImmediate(tick); };
  setImmediate(tick);
  const seconds = await audioSeconds(big.data);
  on = false;
  close(t, seconds, big.seconds, `${(big.seconds / 3600).toFixed(0)} hours of constant frames`);
  t.ok(turns > 5, `the loop turned ${turns} times during the walk`);
});
