// CONTRACT §21 "Audio is charged for what it holds", as an operator runs it: `tollgate serve`
// from a YAML file with a `type: transcription` model priced `audio_per_minute`, and the
// official openai SDK's audio.transcriptions.create. For each format the route reads (FLAC,
// Ogg Opus, Ogg Vorbis, MP3, WAV, WebM), a file whose header claims one second while its frames
// hold minutes is charged by its frames, the debit checked through the admin API to the unit;
// the attack's own file (a 20 MB FLAC whose STREAMINFO says 1 s, then 475 hours of constant
// frames) is charged its 475 hours; a file whose header claims more than its frames hold is
// charged its frames; and truthful files of each format are charged their length as before.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { audioCost } from '../../lib/billing/meter.js';
import { KEY, drainExit, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { flac, mp3Xing, oggOpus, oggVorbis, wavFile, webmOpus } from '../helpers/audio-files.js';

const PRICE = { audio_per_minute: 6 }; // a unit every 10 seconds: 475 hours is 17,100 units

t.test('lying audio headers are charged by the frames, through tollgate serve and the SDK', async (t) => {
  const served = await serveFile(t, operatorConfig({
    server: { port: 0, drain_timeout_ms: 10_000 },
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'whisper', type: 'transcription', provider: 'echo', price: PRICE }],
  }));
  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0, timeout: 120_000 });

  /** Sends `data`; checks the answer, its headers and the debit against `seconds` (the frames'). */
  const charged = async (name: string, data: Buffer, type: string, seconds: number) => {
    const before = await wallet(served.url);
    const { data: body, response } = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(data, name, { type }) }).withResponse();
    const whole = Math.ceil(seconds - 1e-9);
    const units = Number(audioCost(whole, { input_per_mtok: 0, output_per_mtok: 0, ...PRICE }));
    t.same(body, { text: `(echo) ${whole} seconds of audio.` }, `${name}: the echo says the frames' length`);
    t.equal(response.headers.get('x-tollgate-audio-seconds'), String(whole), `${name}: ${whole} s charged`);
    t.equal(response.headers.get('x-tollgate-units-charged'), String(units), `${name}: ${units} units`);
    const after = await wallet(served.url);
    t.equal(before.balance_units - after.balance_units, units, `${name}: the wallet debited ${units} units, once`);
    t.equal(after.held_units, 0, `${name}: no hold left`);
  };

  await t.test('one second claimed, minutes held', async (t) => {
    const files: Array<[string, string, { data: Buffer; seconds: number }]> = [
      ['liar.flac', 'audio/flac', flac({ frames: 400, blockSize: 65535, claimSamples: 48000 })],
      ['liar.opus', 'audio/ogg', oggOpus(12_000, 0x18, 48000)],
      ['liar.ogg', 'audio/ogg', oggVorbis(6000, 8000, 8000)],
      ['liar.mp3', 'audio/mpeg', mp3Xing(9000, 14)],
      ['liar.wav', 'audio/wav', wavFile(4_400_000, { dataSize: 8000 })],
      ['liar.webm', 'audio/webm', webmOpus({ blocks: 12_000, claimMs: 1000, zeroTimecodes: true })],
    ];
    for (const [name, type, file] of files) {
      t.ok(file.seconds >= 9 * 60, `${name}: its frames hold ${(file.seconds / 60).toFixed(1)} minutes`);
      await charged(name, file.data, type, file.seconds);
    }
  });

  await t.test("the attack's file: a 20 MB FLAC whose STREAMINFO says 1 s, then 475 hours of constant frames", async (t) => {
    const hours = 475;
    const frames = Math.ceil((hours * 3600 * 48000) / 65535);
    const file = flac({ frames, blockSize: 65535, claimSamples: 48000 });
    t.ok(file.data.length > 18e6 && file.data.length < 25 * 1024 * 1024, `${(file.data.length / 1e6).toFixed(1)} MB`);
    await charged('attack.flac', file.data, 'audio/flac', file.seconds);
  });

  await t.test('a header that claims more than the frames hold: the frames', async () => {
    await charged('long-claim.flac', flac({ frames: 30, claimSamples: 48000 * 3600 }).data, 'audio/flac', (30 * 4096) / 48000);
    await charged('long-claim.wav', wavFile(24_000, { dataSize: 0x7fffffff }).data, 'audio/wav', 3);
    const webm = webmOpus({ blocks: 50, claimMs: 3_600_000 });
    await charged('long-claim.webm', webm.data, 'audio/webm', webm.seconds);
  });

  await t.test('truthful files of each format: their length, as before', async () => {
    const files: Array<[string, string, { data: Buffer; seconds: number }]> = [
      ['true.flac', 'audio/flac', flac({ frames: 47, blockSize: 4096, rate: 48000, subframe: 'fixed' })],
      ['true.opus', 'audio/ogg', oggOpus(250, 0xf8)],
      ['true.ogg', 'audio/ogg', oggVorbis(160, 16000)],
      ['true.mp3', 'audio/mpeg', mp3Xing(100, 100)],
      ['true.wav', 'audio/wav', wavFile(36_000)],
      ['true.webm', 'audio/webm', webmOpus({ blocks: 80 })],
    ];
    for (const [name, type, file] of files) await charged(name, file.data, type, file.seconds);
  });

  await t.test('a file whose frames cannot be read: 400 invalid_value, param file, nothing charged', async (t) => {
    const before = await wallet(served.url);
    const broken = Buffer.from(oggVorbis(20).data);
    broken[broken.indexOf(Buffer.from([5, 0x76, 0x6f, 0x72, 0x62])) + 7] = 9;
    for (const [name, data] of [['broken.ogg', broken], ['notes.txt', Buffer.from('not audio at all, only words')]] as const) {
      const err: any = await client.audio.transcriptions.create({ model: 'whisper', file: await toFile(data, name) }).catch((e: unknown) => e);
      t.equal(err.status, 400, name);
      t.equal(err.code, 'invalid_value', name);
      t.equal(err.param, 'file', name);
    }
    t.same(await wallet(served.url), before, 'the wallet untouched');
  });
  await drainExit(t, served);
});
