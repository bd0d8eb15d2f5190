// POST /v1/audio/transcriptions and /translations: the official openai SDK's
// audio.transcriptions.create with WAV and MP3 files made in the test, every response_format,
// the charge by the audio's length (ceil(ceil(seconds) x audio_per_minute / 60)), a WAV whose
// data size lies charged by its samples and one of an impossible rate refused, the form re-sent
// to an OpenAI-compatible upstream with only the model rewritten, and every refusal with its
// exact envelope, the wallet untouched. A 413 from a declared length comes before the body is read.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { Busboy } from '@fastify/busboy';
import { audioCost } from '../../lib/billing/meter.js';
import { DEMO_KEY, baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';
import { json, startUpstream, type FakeUpstream } from '../helpers/upstream.js';
import { schemas } from '../helpers/schemas.js';
import { MP3_FRAME_SECONDS, mp3, multipart, wav } from '../helpers/audio.js';
import { rawRequest } from '../helpers/raw-request.js';

const ADMIN = 'audio-admin-token';
const PRICE = { input_per_mtok: 0, output_per_mtok: 0, audio_per_minute: 600 }; // 10 units a second
const POOR_KEY = 'tg_poor_0000000000000000';
const MAX_AUDIO = 512 * 1024;

let up: FakeUpstream;
let gw: TestGateway;

t.before(async () => {
  up = await startUpstream((_req, res) => json(res, 200, { text: 'from upstream' }));
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.server.max_audio_bytes = MAX_AUDIO;
  c.accounts.push({ id: 'poor', plan: 'free', wallet_units: 5, keys: [POOR_KEY] });
  c.providers.oai = { kind: 'openai', base_url: up.baseUrl, timeout_ms: 2000, circuit_failures: 1000 };
  c.models.push({ id: 'whisper-echo', type: 'transcription', provider: 'echo', price: PRICE });
  c.models.push({ id: 'whisper-oai', type: 'transcription', provider: 'oai', upstream_model: 'openai/whisper-large-v3', price: PRICE });
  gw = await startGateway(c);
});
t.teardown(async () => { await gw.close(); await up.close(); });

const client = (key = DEMO_KEY) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
const account = async (id = 'demo'): Promise<any> => (await fetch(`${gw.url}/admin/accounts/${id}`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
const postForm = async (path: string, form: { body: Buffer; contentType: string }, key = DEMO_KEY) => {
  const res = await fetch(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': form.contentType }, body: form.body });
  const text = await res.text();
  let body: any = text;
  try { body = JSON.parse(text); } catch { /* a text format */ }
  return { status: res.status, headers: res.headers, body };
};

/** The parts of a multipart body as the upstream got it. */
function parts(seen: { headers: any; raw: Buffer }): Promise<{ fields: [string, string][]; files: { name: string; filename: string; type: string; data: Buffer }[] }> {
  return new Promise((resolve, reject) => {
    const fields: [string, string][] = [];
    const files: { name: string; filename: string; type: string; data: Buffer }[] = [];
    const bb = Busboy({ headers: seen.headers });
    bb.on('field', (k, v) => fields.push([k, v]));
    bb.on('file', (name, stream, filename, _e, type) => {
      const c: Buffer[] = [];
      stream.on('data', (d: Buffer) => c.push(d));
      stream.on('end', () => files.push({ name, filename, type, data: Buffer.concat(c) }));
    });
    bb.on('finish', () => resolve({ fields, files }));
    bb.on('error', reject);
    bb.end(seen.raw);
  });
}

t.test('echo: WAV and MP3 through the SDK, every response_format, charged by the second', async (t) => {
  const before = await account();
  const two = wav(2);
  const r = await client().audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(two, 'tone.wav', { type: 'audio/wav' }) });
  t.same(r, { text: '(echo) 2 seconds of audio.' });
  const mid = await account();
  t.equal(before.balance_units - mid.balance_units, 20, '2 s at 600 units a minute');
  t.equal(Number(audioCost(2, PRICE)), 20);

  // 100 frames: 2.61 s, so 3 seconds started: ceil(3 x 600 / 60) = 30.
  const frames = mp3(100);
  const raw = await client().audio.transcriptions.create({
    model: 'whisper-echo', file: await toFile(frames, 'speech.mp3', { type: 'audio/mpeg' }), response_format: 'verbose_json', prompt: 'hello there', language: 'en',
  }).withResponse();
  t.equal(raw.response.headers.get('x-tollgate-units-charged'), '30');
  t.equal(raw.response.headers.get('x-tollgate-audio-seconds'), '3');
  t.match(raw.data, { task: 'transcribe', language: 'en', text: 'hello there', segments: [{ id: 0, start: 0, text: 'hello there' }] });
  t.ok(Math.abs((raw.data as any).duration - 100 * MP3_FRAME_SECONDS) < 0.01, 'the MP3 frames counted');

  const text = await client().audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(two, 'a.wav'), response_format: 'text', prompt: 'plain words' });
  t.equal(text, 'plain words\n');
  const srt = await client().audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(two, 'a.wav'), response_format: 'srt', prompt: 'caption' });
  t.equal(srt, '1\n00:00:00,000 --> 00:00:02,000\ncaption\n\n');
  const vtt = await client().audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(two, 'a.wav'), response_format: 'vtt', prompt: 'caption' });
  t.equal(vtt, 'WEBVTT\n\n00:00:00.000 --> 00:00:02.000\ncaption\n\n');
  const tr = await client().audio.translations.create({ model: 'whisper-echo', file: await toFile(two, 'a.wav'), response_format: 'verbose_json' });
  t.match(tr, { task: 'translate', language: 'english', duration: 2 });
  const after = await account();
  t.equal(mid.balance_units - after.balance_units, 30 + 4 * 20, 'each request debited once');
  t.equal(after.held_units, 0);
});

t.test('a WAV whose header lies is charged by its samples, or refused', async (t) => {
  // 4 s of 16 kHz audio (128,000 bytes) whose data chunk says 1 s: the samples run to the end.
  const liar = wav(4);
  liar.writeUInt32LE(32_000, 40);
  const r = await postForm('/v1/audio/transcriptions', multipart([['model', 'whisper-echo']], { filename: 'liar.wav', type: 'audio/wav', data: liar }));
  t.equal(r.status, 200);
  t.equal(r.headers.get('x-tollgate-audio-seconds'), '4', 'the samples that are there, not the data size');
  t.equal(r.headers.get('x-tollgate-units-charged'), String(audioCost(4, PRICE)));
  // A rate no recording has (4 MHz): 400 invalid_value, param file, nothing charged.
  const before = await account();
  const fast = await postForm('/v1/audio/transcriptions', multipart([['model', 'whisper-echo']], { filename: 'fast.wav', type: 'audio/wav', data: wav(4, 16000, 4_000_000) }));
  t.equal(fast.status, 400);
  t.match(fast.body, { code: 'invalid_value', param: 'file', message: /sample rate of 4000000 Hz/ });
  t.same(schemas.error(fast.body), []);
  const after = await account();
  t.equal(after.balance_units, before.balance_units);
  t.equal(after.held_units, 0);
  // MP3 frames claiming nothing unusual: their length.
  const honest = await postForm('/v1/audio/transcriptions', multipart([['model', 'whisper-echo']], { filename: 'a.mp3', type: 'audio/mpeg', data: mp3(400) }));
  t.equal(honest.headers.get('x-tollgate-audio-seconds'), String(Math.ceil(400 * MP3_FRAME_SECONDS)));
});

t.test('openai upstream: the form re-sent with only the model rewritten; its answer passed through', async (t) => {
  const file = wav(1);
  up.setScript((req, res) => {
    if (req.url === '/v1/audio/translations') { res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }); res.end('1\n00:00:00,000 --> 00:00:01,000\nhi\n\n'); return; }
    json(res, 200, { text: 'from upstream', usage: { type: 'duration', seconds: 1 } }, { 'x-request-id': 'up-7' });
  });
  const before = await account();
  const form = multipart([['model', 'whisper-oai'], ['language', 'de'], ['prompt', 'Guten Tag'], ['temperature', '0.2'], ['timestamp_granularities[]', 'word'], ['response_format', 'json']],
    { filename: 'gruss.wav', type: 'audio/wav', data: file });
  const r = await postForm('/v1/audio/transcriptions', form);
  t.equal(r.status, 200);
  t.same(r.body, { text: 'from upstream', usage: { type: 'duration', seconds: 1 } });
  t.equal(r.headers.get('x-upstream-request-id'), 'up-7');
  const seen = up.requests.at(-1)!;
  t.equal(seen.url, '/v1/audio/transcriptions');
  t.match(seen.headers['content-type'], /^multipart\/form-data; boundary=/);
  const got = await parts(seen);
  t.same(got.fields, [['model', 'openai/whisper-large-v3'], ['language', 'de'], ['prompt', 'Guten Tag'], ['temperature', '0.2'], ['timestamp_granularities[]', 'word'], ['response_format', 'json']],
    'every field as sent, in order, only the model rewritten');
  t.equal(got.files.length, 1);
  t.match(got.files[0], { name: 'file', filename: 'gruss.wav', type: 'audio/wav' });
  t.ok(got.files[0]!.data.equals(file), 'the file byte for byte');
  const srt = await postForm('/v1/audio/translations', multipart([['model', 'whisper-oai'], ['response_format', 'srt']], { filename: 'a.wav', type: 'audio/wav', data: file }));
  t.equal(srt.body, '1\n00:00:00,000 --> 00:00:01,000\nhi\n\n');
  t.match(srt.headers.get('content-type'), /^text\/plain/);
  const after = await account();
  t.equal(before.balance_units - after.balance_units, 20, '1 s, twice');

  const bad: [string, (res: any) => void, number, string][] = [
    ['500', (res) => json(res, 500, { error: { message: 'boom' } }), 502, 'provider_error'],
    ['json without text', (res) => json(res, 200, { words: [] }), 502, 'provider_error'],
    ['429', (res) => json(res, 429, { error: { message: 'slow' } }), 503, 'model_unavailable'],
  ];
  for (const [name, script, status, code] of bad) {
    up.setScript((_req, res) => script(res));
    const e = await client().audio.transcriptions.create({ model: 'whisper-oai', file: await toFile(file, 'a.wav') }).catch((err) => err);
    t.equal(e.status, status, name);
    t.equal(e.code, code, name);
  }
  const end = await account();
  t.equal(end.balance_units, after.balance_units, 'failures charge nothing');
  t.equal(end.held_units, 0);
});

t.test('refusals: exact status, code, param and envelope; the wallet untouched', async (t) => {
  const before = await account();
  const file = { filename: 'a.wav', type: 'audio/wav', data: wav(1) };
  const cases: [string, { body: Buffer; contentType: string }, number, string, string | null][] = [
    ['no file', multipart([['model', 'whisper-echo']]), 400, 'missing_required_parameter', 'file'],
    ['no model', multipart([], file), 400, 'missing_required_parameter', 'model'],
    ['a chat model', multipart([['model', 'echo-small']], file), 400, 'unsupported_value', 'model'],
    ['unknown model', multipart([['model', 'nope']], file), 404, 'model_not_found', 'model'],
    ['not audio', multipart([['model', 'whisper-echo']], { ...file, data: Buffer.from('just some text, not audio at all') }), 400, 'invalid_value', 'file'],
    ['empty file', multipart([['model', 'whisper-echo']], { ...file, data: Buffer.alloc(0) }), 400, 'invalid_value', 'file'],
    ['bad format', multipart([['model', 'whisper-echo'], ['response_format', 'mp4']], file), 400, 'unsupported_value', 'response_format'],
    ['bad temperature', multipart([['model', 'whisper-echo'], ['temperature', 'hot']], file), 400, 'invalid_type', 'temperature'],
    ['temperature 2', multipart([['model', 'whisper-echo'], ['temperature', '2']], file), 400, 'invalid_value', 'temperature'],
    ['two models', multipart([['model', 'whisper-echo'], ['model', 'whisper-oai']], file), 400, 'invalid_value', 'model'],
    ['two files', (() => { const a = multipart([['model', 'whisper-echo']], file); const b = multipart([], { ...file, name: 'file' }); return { body: Buffer.concat([a.body.subarray(0, a.body.length - 28), b.body]), contentType: a.contentType }; })(), 400, 'invalid_value', 'file'],
    ['truncated', (() => { const f = multipart([['model', 'whisper-echo']], file); return { body: f.body.subarray(0, f.body.length - 100), contentType: f.contentType }; })(), 400, 'invalid_value', 'body'],
    ['no boundary', { body: multipart([['model', 'whisper-echo']], file).body, contentType: 'multipart/form-data' }, 400, 'invalid_value', 'body'],
    ['JSON', { body: Buffer.from('{"model":"whisper-echo"}'), contentType: 'application/json' }, 415, 'unsupported_media_type', null],
  ];
  for (const [name, form, status, code, param] of cases) {
    const r = await postForm('/v1/audio/transcriptions', form);
    t.equal(r.status, status, name);
    t.same(schemas.error(r.body), [], `${name}: the envelope`);
    t.equal(r.body.code, code, name);
    t.equal(r.body.param, param, name);
    t.same({ ...r.body.error, suggested_models: undefined }, { message: r.body.message, type: 'invalid_request_error', param, code, suggested_models: undefined });
    t.equal(r.body.request_id, r.headers.get('x-request-id'));
  }
  const chat = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'whisper-echo', messages: [{ role: 'user', content: 'x' }] }),
  });
  t.equal(chat.status, 400);
  t.match(await chat.json(), { code: 'unsupported_value', param: 'model', message: /is a transcription model; use POST \/v1\/audio\/transcriptions/ });
  const poor = await account('poor');
  const e = await client(POOR_KEY).audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(wav(1), 'a.wav') }).catch((err) => err);
  t.equal(e.status, 402);
  t.equal(e.code, 'insufficient_credits');
  t.match(e.error, { wallet_balance_units: 5 });
  t.same(await account('poor'), poor, 'the poor wallet unchanged');
  const get = await fetch(`${gw.url}/v1/audio/translations`, { headers: { authorization: `Bearer ${DEMO_KEY}` } });
  t.equal(get.status, 405);
  t.equal(get.headers.get('allow'), 'POST');
  const after = await account();
  t.equal(after.balance_units, before.balance_units, 'nothing charged');
  t.equal(after.held_units, 0);
});

t.test('server.max_audio_bytes: 413 from the declared length, before the body is read', async (t) => {
  const before = await account();
  const big = multipart([['model', 'whisper-echo']], { filename: 'long.wav', type: 'audio/wav', data: wav(20) }); // 640 KB > 512 KiB
  t.ok(big.body.length > MAX_AUDIO);
  const r = await postForm('/v1/audio/transcriptions', big);
  t.equal(r.status, 413);
  t.match(r.body, { code: 'request_too_large', type: 'invalid_request_error', param: null });
  // Raw: only the headers and a few bytes sent; the answer comes at once, and the connection closes.
  const start = Date.now();
  const raw = await rawRequest(gw.url, {
    method: 'POST', path: '/v1/audio/transcriptions',
    headers: [['authorization', `Bearer ${DEMO_KEY}`], ['content-type', big.contentType], ['content-length', String(big.body.length)]],
    body: big.body.subarray(0, 1000), halfClose: true, timeoutMs: 5000,
  });
  t.equal(raw.responses[0]?.status, 413);
  t.equal(raw.responses[0]?.headers.connection, 'close');
  t.equal(JSON.parse(raw.responses[0]!.body).code, 'request_too_large');
  t.ok(Date.now() - start < 4000, 'not waiting for the rest of the body');
  // A chunked body past the limit: 413 once the bytes passed it.
  const chunked = await fetch(`${gw.url}/v1/audio/transcriptions`, {
    method: 'POST', headers: { authorization: `Bearer ${DEMO_KEY}`, 'content-type': big.contentType },
    body: new ReadableStream({ start(c) { c.enqueue(new Uint8Array(big.body)); c.close(); } }), duplex: 'half',
  } as RequestInit);
  t.equal(chunked.status, 413);
  const after = await account();
  t.equal(after.balance_units, before.balance_units);
  t.equal(after.held_units, 0);
});

t.test('usage records name the audio routes', async (t) => {
  const page: any = await (await fetch(`${gw.url}/admin/usage/records?account=demo&model=whisper-echo&limit=1000`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  const routes = new Set(page.records.map((r: any) => r.route));
  t.ok(routes.has('/v1/audio/transcriptions') && routes.has('/v1/audio/translations'));
  t.match(page.records[0], { model: 'whisper-echo', status: 200, units: 20 });
});
