// Rerank, score and audio from a YAML file served by `tollgate serve --config`: models of
// `type: rerank` and `type: transcription` on echo and on a fake OpenAI-compatible server,
// `price.audio_per_minute` and `server.max_audio_bytes`. Raw HTTP and the SDK's generic post for rerank and score, the
// openai SDK for transcriptions and translations; the wallet to the unit after each.

import t from 'tap';
import OpenAI, { toFile } from 'openai';
import { ADMIN, KEY, drainExit, operatorConfig, serveFile, wallet } from '../helpers/operator.js';
import { json, startUpstream } from '../helpers/upstream.js';
import { multipart, wav } from '../helpers/audio.js';

const TOKEN_PRICE = { input_per_mtok: 1_000_000, output_per_mtok: 0 }; // 1 unit a token
const AUDIO_PRICE = { audio_per_minute: 120 }; // 2 units a second

const upstream = await startUpstream((req, res) => {
  if (req.url === '/v1/rerank') return json(res, 200, { results: [{ index: 1, relevance_score: 0.9 }, { index: 0, relevance_score: 0.1 }], usage: { total_tokens: 21 } });
  if (req.url === '/v1/score') return json(res, 200, { data: [{ index: 0, score: 0.42 }], usage: { prompt_tokens: 8, total_tokens: 8 } });
  if (req.url === '/v1/audio/transcriptions') return json(res, 200, { text: 'transcribed upstream' });
  json(res, 404, { error: { message: 'no such route' } });
});
t.teardown(() => upstream.close());

t.test('rerank, score and audio models from YAML', async (t) => {
  const served = await serveFile(t, operatorConfig({
    server: { port: 0, drain_timeout_ms: 10_000, max_audio_bytes: 100_000 },
    providers: { echo: { kind: 'echo' }, vllm: { kind: 'openai', base_url: upstream.baseUrl } },
    models: [
      { id: 'rerank-echo', type: 'rerank', provider: 'echo', price: TOKEN_PRICE },
      { id: 'rerank-vllm', type: 'rerank', provider: 'vllm', upstream_model: 'BAAI/bge-reranker-v2-m3', price: TOKEN_PRICE },
      { id: 'whisper-echo', type: 'transcription', provider: 'echo', price: AUDIO_PRICE },
      { id: 'whisper-vllm', type: 'transcription', provider: 'vllm', upstream_model: 'openai/whisper-large-v3', price: AUDIO_PRICE },
    ],
  }));
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${served.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { status: res.status, headers: res.headers, body: await res.json() as any };
  };
  let w = await wallet(served.url);
  const r = await post('/v1/rerank', { model: 'rerank-vllm', query: 'q', documents: ['a', 'b'] });
  t.equal(r.status, 200);
  t.same(r.body.results.map((x: any) => [x.index, x.relevance_score]), [[1, 0.9], [0, 0.1]]);
  t.equal(upstream.requests.at(-1)!.body.model, 'BAAI/bge-reranker-v2-m3');
  let now = await wallet(served.url);
  t.equal(w.balance_units - now.balance_units, 21, 'the upstream total_tokens at 1 unit a token');
  w = now;
  const s = await post('/v1/score', { model: 'rerank-vllm', text_1: 'x', text_2: 'y' });
  t.same(s.body.data, [{ index: 0, object: 'score', score: 0.42 }]);
  const e = await post('/v1/rerank', { model: 'rerank-echo', query: 'blue sky', documents: ['blue sky', 'red'] });
  t.same(e.body.results.map((x: any) => x.index), [0, 1]);
  now = await wallet(served.url);
  t.equal(w.balance_units - now.balance_units, 8 + e.body.usage.total_tokens);
  w = now;

  const client = new OpenAI({ apiKey: KEY, baseURL: `${served.url}/v1`, maxRetries: 0 });
  // Rerank and score have no SDK method: the SDK's generic post speaks them unchanged.
  const ranked: any = await client.post('/rerank', { body: { model: 'rerank-echo', query: 'a cat', documents: ['the cat sat on a mat', 'dogs bark'] } });
  t.same(ranked.results.map((r: any) => r.index), [0, 1], 'by falling score, through the SDK');
  t.ok(ranked.results[0].relevance_score > ranked.results[1].relevance_score);
  const scored: any = await client.post('/score', { body: { model: 'rerank-echo', text_1: 'a cat', text_2: ['the cat sat', 'dogs bark'] } });
  t.equal(scored.object, 'list');
  t.equal(scored.data.length, 2);
  const notRerank: any = await client.post('/rerank', { body: { model: 'whisper-echo', query: 'x', documents: ['y'] } }).catch((err: unknown) => err);
  t.equal(notRerank.status, 400);
  t.equal(notRerank.code, 'unsupported_value');
  t.equal(notRerank.param, 'model');
  now = await wallet(served.url);
  t.equal(w.balance_units - now.balance_units, ranked.usage.total_tokens + scored.usage.total_tokens, 'charged on the tokens (1 unit per token here), the refusal nothing');
  w = now;
  const a = await client.audio.transcriptions.create({ model: 'whisper-vllm', file: await toFile(wav(1.5), 'a.wav', { type: 'audio/wav' }) });
  t.same(a, { text: 'transcribed upstream' });
  const b = await client.audio.translations.create({ model: 'whisper-echo', file: await toFile(wav(2), 'b.wav'), response_format: 'text', prompt: 'hello' });
  t.equal(b, 'hello\n');
  now = await wallet(served.url);
  t.equal(w.balance_units - now.balance_units, 4 + 4, '2 seconds started each, at 2 units a second');
  t.equal(now.held_units, 0);
  w = now;

  const big = multipart([['model', 'whisper-echo']], { filename: 'long.wav', type: 'audio/wav', data: wav(4) });
  const tooBig = await fetch(`${served.url}/v1/audio/transcriptions`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': big.contentType }, body: big.body });
  t.equal(tooBig.status, 413, 'server.max_audio_bytes');
  t.match(await tooBig.json(), { code: 'request_too_large' });
  const wrong = await client.audio.transcriptions.create({ model: 'rerank-echo', file: await toFile(wav(1), 'c.wav') }).catch((err) => err);
  t.equal(wrong.status, 400);
  t.equal(wrong.code, 'unsupported_value');
  t.equal(wrong.param, 'model');
  t.same(await wallet(served.url), w, 'refusals charge nothing');
  const records: any = await (await fetch(`${served.url}/admin/usage/records?account=demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json();
  t.same([...new Set(records.records.map((x: any) => x.route))].sort(), ['/v1/audio/transcriptions', '/v1/audio/translations', '/v1/rerank', '/v1/score']);
  await drainExit(t, served);
});
