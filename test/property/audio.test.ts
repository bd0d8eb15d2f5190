// Property tests at the audio routes' outside inputs (fast-check, bounded runs):
// - multipart bodies with hostile boundaries, truncated parts, huge part headers and random
//   bytes: the form parser answers a 400 of the contract's codes or a form, never another
//   error, never a hang, never a crash (a truncated file part once crashed the process);
// - audio headers that lie (WAV rates, sizes and chunk lengths, MPEG frame headers, random
//   bytes after a real header): a finite length above zero, or the file refused 400
//   invalid_value, param file (that the length is the frames' is audio-frames.test.ts);
// - the same bodies through a real gateway: a contract status and code, never a 500, and the
//   wallet charged only for a 200, exactly its audio's price.

import t from 'tap';
import fc from 'fast-check';
import { GatewayError } from '../../lib/errors.js';
import { parseAudioForm } from '../../lib/dialects/audio/form.js';
import { audioSeconds } from '../../lib/dialects/audio/duration.js';
import { DEMO_KEY, baseConfig, startGateway } from '../helpers/gateway.js';
import { mp3, multipart, wav } from '../helpers/audio.js';
import { holds } from './arbitraries.js';

const FORM_CODES = new Set(['invalid_value', 'missing_required_parameter', 'unsupported_value', 'invalid_type']);

/** Rejects after `ms`: a parse that never settles is a failure, not a stuck test. */
function within<T>(p: Promise<T>, ms = 2000): Promise<T> {
  return Promise.race([p, new Promise<T>((_r, j) => setTimeout(() => j(new Error('no answer within 2 s')), ms).unref())]);
}

const boundary = fc.oneof(
  { arbitrary: fc.constant('b'), weight: 3 },
  { arbitrary: fc.string({ unit: fc.constantFrom('a', '-', '"', ' ', '=', ';', '\r', '\n', '\u00e9', '0'), minLength: 0, maxLength: 80 }), weight: 1 },
  { arbitrary: fc.string({ minLength: 60, maxLength: 200 }), weight: 1 },
);

/** Mostly null: each mutation rare enough that some forms arrive whole. */
const rare = <T>(a: fc.Arbitrary<T>): fc.Arbitrary<T | null> => fc.oneof({ arbitrary: fc.constant(null), weight: 3 }, { arbitrary: a, weight: 1 });

/** A form body: well-made, then cut, spliced with junk, or with a part header blown up. */
const hostileForm = fc.record({
  boundary,
  quoted: fc.boolean(),
  fields: fc.array(fc.oneof(
    { arbitrary: fc.tuple(fc.constant('response_format'), fc.constantFrom('json', 'text', 'verbose_json', 'srt', 'vtt')), weight: 2 },
    { arbitrary: fc.tuple(fc.constantFrom('prompt', 'language', 'x'), fc.string({ maxLength: 40 })), weight: 2 },
    { arbitrary: fc.tuple(fc.constantFrom('model', 'response_format', 'temperature', 'file', ''), fc.string({ maxLength: 40 })), weight: 1 },
  ), { maxLength: 4 }),
  file: fc.option(fc.record({ name: fc.constantFrom('file', 'file', 'audio'), data: fc.oneof(fc.constant(wav(0.05)), fc.constant(mp3(3)), fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a))) }), { freq: 8 }),
  cut: rare(fc.nat()),
  junkAt: rare(fc.tuple(fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 64 }))),
  hugeHeader: rare(fc.integer({ min: 1, max: 200_000 })),
  // The boundary the content type names may not be the one the body uses.
  lie: fc.constantFrom(false, false, false, true),
  withModel: fc.boolean(),
});

function build(f: fc.Arbitrary<any> extends fc.Arbitrary<infer T> ? T : never): { body: Buffer; contentType: string } {
  const safe = f.boundary.replace(/[\r\n]/g, '') || 'x';
  const m = multipart(f.withModel ? [['model', 'whisper-echo'], ...f.fields] : f.fields, f.file === null ? undefined : { name: f.file.name, filename: 'a.bin', type: 'application/octet-stream', data: f.file.data }, safe);
  let body = m.body;
  if (f.hugeHeader !== null) {
    const at = body.indexOf('\r\n') + 2;
    body = Buffer.concat([body.subarray(0, at), Buffer.from(`x-pad: ${'p'.repeat(f.hugeHeader)}\r\n`), body.subarray(at)]);
  }
  if (f.junkAt !== null) {
    const at = f.junkAt[0] % (body.length + 1);
    body = Buffer.concat([body.subarray(0, at), Buffer.from(f.junkAt[1]), body.subarray(at)]);
  }
  if (f.cut !== null) body = body.subarray(0, f.cut % (body.length + 1));
  const named = f.lie ? `${safe}x` : safe;
  return { body, contentType: `multipart/form-data; boundary=${f.quoted ? `"${named}"` : named}` };
}

t.test('the form parser: a form or a contract 400, never another error or a hang', async (t) => {
  await holds(t, 'multipart bodies', fc.asyncProperty(hostileForm, async (f) => {
    const { body, contentType } = build(f);
    try {
      const form = await within(parseAudioForm(body, contentType));
      if (typeof form.model !== 'string' || form.file.data.length === 0) throw new Error('a form without its model or file');
    } catch (err) {
      if (!(err instanceof GatewayError) || err.status !== 400 || !FORM_CODES.has(err.code)) throw err;
    }
  }), 300);
});

/** A WAV whose every header field may lie, with some real samples after it. */
const lyingWav = fc.record({
  seconds: fc.double({ min: 0.01, max: 3, noNaN: true }),
  rate: fc.oneof(fc.constant(16000), fc.integer({ min: 1, max: 0xffffffff })),
  channels: fc.integer({ min: 0, max: 0xffff }),
  bits: fc.constantFrom(0, 8, 16, 24, 32, 64, 0xffff),
  dataSize: fc.option(fc.integer({ min: 0, max: 0xffffffff })),
  format: fc.constantFrom(1, 3, 0xfffe, 0),
  tail: fc.uint8Array({ maxLength: 64 }),
});

t.test('audio headers that lie: a finite length, or a 400 naming the file', async (t) => {
  await holds(t, 'lying WAV headers', fc.asyncProperty(lyingWav, async (w) => {
    const file = wav(w.seconds);
    file.writeUInt16LE(w.format, 20);
    file.writeUInt16LE(w.channels, 22);
    file.writeUInt32LE(w.rate, 24);
    file.writeUInt32LE((w.rate * Math.max(1, w.channels)) >>> 0, 28);
    file.writeUInt16LE(w.bits, 34);
    if (w.dataSize !== null) file.writeUInt32LE(w.dataSize, 40);
    const data = Buffer.concat([file, Buffer.from(w.tail)]);
    await check(data);
  }), 200);
  await holds(t, 'MPEG frames with random headers', fc.asyncProperty(fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: 1, max: 200 }), async (header, frames) => {
    const data = mp3(frames);
    data.writeUInt32BE(header >>> 0, 0);
    await check(data);
  }), 200);
  await holds(t, 'random bytes', fc.asyncProperty(fc.uint8Array({ maxLength: 2000 }), async (a) => check(Buffer.from(a))), 200);
});

async function check(data: Buffer): Promise<void> {
  let seconds: number;
  try {
    seconds = await within(audioSeconds(data));
  } catch (err) {
    if (err instanceof GatewayError && err.code === 'invalid_value' && err.param === 'file') return;
    throw err;
  }
  if (!Number.isFinite(seconds) || seconds <= 0) throw new Error(`${seconds} s for ${data.length} bytes`);
}

t.test('through a gateway: a contract status, never a 500; only a 200 is charged, at its price', async (t) => {
  const c = baseConfig();
  c.admin = { token: 'prop-admin-token-0123' };
  c.server.max_audio_bytes = 64 * 1024;
  c.models.push({ id: 'whisper-echo', type: 'transcription', provider: 'echo', price: { audio_per_minute: 60 } }); // 1 unit a second
  const gw = await startGateway(c);
  t.teardown(() => gw.close());
  const balance = async () => ((await (await fetch(`${gw.url}/admin/accounts/demo`, { headers: { authorization: 'Bearer prop-admin-token-0123' } })).json()) as any);
  const allowed = new Set([200, 400, 404, 413, 415]);
  let answered = 0;
  await holds(t, 'audio requests', fc.asyncProperty(hostileForm, async (f) => {
    const { body, contentType } = build(f);
    const before = await balance();
    const res = await fetch(`${gw.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': contentType }, body });
    const text = await res.text();
    if (!allowed.has(res.status)) throw new Error(`status ${res.status}: ${text}`);
    const after = await balance();
    if (after.held_units !== 0) throw new Error('a hold left');
    const charged = before.balance_units - after.balance_units;
    if (res.status === 200) {
      answered++;
      if (String(charged) !== res.headers.get('x-tollgate-units-charged') || String(charged) !== res.headers.get('x-tollgate-audio-seconds')) {
        throw new Error(`charged ${charged} for ${res.headers.get('x-tollgate-audio-seconds')} s`);
      }
    } else {
      if (charged !== 0) throw new Error(`a ${res.status} charged ${charged}`);
      const e = JSON.parse(text);
      if (e.error?.code !== e.code || typeof e.request_id !== 'string') throw new Error(`not the envelope: ${text}`);
    }
  }), 60);
  t.ok(answered > 0, `some generated requests were answered (${answered})`);
});
