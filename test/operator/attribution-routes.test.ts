// Tags and end users on the metered routes beyond generation (CONTRACT section 20): embeddings
// (the openai SDK's `user` and defaultHeaders), rerank and score (raw HTTP, `user` in the body),
// audio transcriptions (the SDK, headers only: a form has no `user` here) and the Messages API
// (raw HTTP), served from YAML by `tollgate serve --config` on echo models; each leaves its tags
// and end user in its usage record, and a bad header is refused 400 on each before anything is held.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { KEY, ADMIN, drainExit, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { wav } from '../helpers/audio.js';

const PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 };

t.test('every metered route reads tags and the end user once, where it is admitted', async (t) => {
  const served = await serveFile(t, operatorConfig({
    server: { port: 0, drain_timeout_ms: 10_000, max_audio_bytes: 200_000 },
    providers: { echo: { kind: 'echo' } },
    models: [
      { id: 'embed-echo', type: 'embedding', provider: 'echo', price: PRICE },
      { id: 'rerank-echo', type: 'rerank', provider: 'echo', price: PRICE },
      { id: 'whisper-echo', type: 'transcription', provider: 'echo', price: { audio_per_minute: 120 } },
      { id: 'chat-echo', provider: 'echo', price: PRICE },
    ],
  }));
  const url = served.url;
  const sdk = new OpenAI({ apiKey: KEY, baseURL: `${url}/v1`, maxRetries: 0, defaultHeaders: { 'x-tollgate-tags': 'rag' } });
  await sdk.embeddings.create({ model: 'embed-echo', input: ['hello', 'world'], user: 'emb-user' });
  const post = async (path: string, body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    return { status: res.status, body: await res.json() as any };
  };
  t.equal((await post('/v1/rerank', { model: 'rerank-echo', query: 'q', documents: ['a', 'b'], user: 'rr-user' }, { 'x-tollgate-tags': 'rank' })).status, 200);
  t.equal((await post('/v1/score', { model: 'rerank-echo', text_1: 'x', text_2: 'y' }, { 'x-tollgate-tags': 'score', 'x-tollgate-end-user': 'sc-user' })).status, 200);
  await sdk.audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(wav(1), 'a.wav', { type: 'audio/wav' }) },
    { headers: { 'x-tollgate-tags': 'voice', 'x-tollgate-end-user': 'au-user' } });
  t.equal((await post('/v1/messages', { model: 'chat-echo', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }, { 'x-tollgate-tags': 'agent', 'x-tollgate-end-user': 'ms-user' })).status, 200);

  let records: any[] = [];
  for (let i = 0; i < 50 && records.length < 5; i++) {
    const page = await fetch(`${url}/admin/usage/records?account=demo&limit=100`, { headers: { authorization: `Bearer ${ADMIN}` } });
    records = ((await page.json()) as any).records;
    if (records.length < 5) await new Promise((r) => setTimeout(r, 50));
  }
  const of = (route: string) => records.filter((r) => r.route === route).map((r) => [r.tags, r.end_user]);
  t.same(of('/v1/embeddings'), [[['rag'], 'emb-user']], 'embeddings: the body\'s user');
  t.same(of('/v1/rerank'), [[['rank'], 'rr-user']]);
  t.same(of('/v1/score'), [[['score'], 'sc-user']]);
  t.same(of('/v1/audio/transcriptions'), [[['voice'], 'au-user']]);
  t.same(of('/v1/messages'), [[['agent'], 'ms-user']]);

  const before = await wallet(url);
  const bad = { 'x-tollgate-tags': 'BAD TAG' };
  for (const [path, body] of [['/v1/embeddings', { model: 'embed-echo', input: 'x' }], ['/v1/rerank', { model: 'rerank-echo', query: 'q', documents: ['a'] }],
    ['/v1/messages', { model: 'chat-echo', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }]] as const) {
    const r = await post(path, body, bad);
    t.equal(r.status, 400, path);
    t.equal(r.body.error?.type === undefined ? r.body.type : r.body.error.type, 'invalid_request_error', path);
  }
  const audio: any = await sdk.audio.transcriptions.create({ model: 'whisper-echo', file: await toFile(wav(1), 'a.wav', { type: 'audio/wav' }) },
    { headers: { 'x-tollgate-end-user': 'x'.repeat(129) } }).catch((e) => e);
  t.equal(audio.status, 400);
  t.equal(audio.param, 'x-tollgate-end-user');
  t.same(await wallet(url), before, 'no refusal held or charged anything');
  await drainExit(t, served);
});
