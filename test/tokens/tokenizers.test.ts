// Prompt and completion counts follow the model's own tokenizer (CONTRACT section 10): a
// Hugging Face tokenizer.json read locally, or the model server's own POST /tokenize (vLLM and
// llama.cpp shapes), cached, bounded in time, and falling back to the local estimate.

import t from 'tap';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { Tokenizer } from '@huggingface/tokenizers';
import { readFileSync } from 'node:fs';
import { createGateway } from '../../lib/gateway.js';
import { ConfigValueError } from '../../lib/config/value-error.js';
import { counter, loadTokenizers } from '../../lib/tokens/count.js';
import { PRO_KEY, baseConfig, postChat, sseData, startGateway } from '../helpers/gateway.js';
import { completionBody, json, startUpstream, writeSse, chunk } from '../helpers/upstream.js';

const TINY = fileURLToPath(new URL('../fixtures/tokenizers/tiny-bpe/tokenizer.json', import.meta.url));
const HINDI = 'नमस्ते दुनिया, आप कैसे हैं?';
const auth = { authorization: `Bearer ${PRO_KEY}`, 'content-type': 'application/json' };
const tiny = new Tokenizer(JSON.parse(readFileSync(TINY, 'utf8')), {});
const tinyCount = (s: string) => tiny.encode(s, { add_special_tokens: false }).ids.length;

t.test('a tokenizer.json counts as the model does, not as an OpenAI encoding', async (t) => {
  await loadTokenizers([TINY, 'o200k_base']);
  t.equal(counter(TINY)('hello world'), 2, 'two merged tokens');
  t.equal(counter(TINY)(HINDI), Buffer.byteLength(HINDI), 'no merges for Devanagari: one token per byte');
  t.ok(counter(TINY)(HINDI) > 3 * counter('o200k_base')(HINDI), 'far more than o200k_base says');
});

t.test('through the gateway: context checks and counted usage use the tokenizer.json', async (t) => {
  const up = await startUpstream((_req, res) => json(res, 200, completionBody(HINDI, { usage: undefined })));
  const c = baseConfig();
  c.providers.up = { kind: 'openai', base_url: up.baseUrl };
  c.models.push({ id: 'qwen', provider: 'up', tokenizer: TINY, context_window: 200, max_output_tokens: 10 });
  const gw = await startGateway(c);
  t.teardown(async () => { await gw.close(); await up.close(); });
  const res = await postChat(gw.url, { model: 'qwen', messages: [{ role: 'user', content: 'hello world' }] }, auth);
  t.equal(res.status, 200);
  t.equal(res.json().usage.completion_tokens, tinyCount(HINDI), 'no upstream usage: counted with the model tokenizer');
  t.equal(res.json().usage.prompt_tokens, 3 + 3 + 2, 'priming + one message framing + 2 tokens');
  const long = await postChat(gw.url, { model: 'qwen', messages: [{ role: 'user', content: HINDI.repeat(3) }] }, auth);
  t.equal(long.status, 422, `${Buffer.byteLength(HINDI) * 3} tokens by this tokenizer do not fit 200 (o200k would say they do)`);
  t.equal(long.json().code, 'context_length_exceeded');
});

t.test('a tokenizer.json that cannot be read stops the start with a message naming it', async (t) => {
  const c = baseConfig();
  c.models.push({ id: 'bad', provider: 'echo', tokenizer: '/nonexistent/tokenizer.json' });
  const gw = createGateway(c);
  const err = await gw.ready.then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof ConfigValueError, 'a ConfigValueError: serve prints it as `path: message`');
  t.equal((err as ConfigValueError).line,
    `models[${c.models.length - 1}].tokenizer: cannot load "/nonexistent/tokenizer.json": ENOENT: no such file or directory, open '/nonexistent/tokenizer.json'`);
  await gw.close();
});

/** A model server with POST /tokenize: vLLM's shape (`count`) or llama.cpp's (`tokens`). */
async function tokenizingUpstream(shape: 'vllm' | 'llamacpp', opts: { delayMs?: number; status?: number } = {}) {
  const calls: string[] = [];
  const up = await startUpstream(async (req, res, body) => {
    if (req.url === '/tokenize') {
      const text: string = shape === 'vllm' ? body.prompt : body.content;
      calls.push(text);
      if (opts.delayMs) await sleep(opts.delayMs);
      if (res.destroyed) return;
      if (opts.status) return json(res, opts.status, { error: 'no' });
      // This server counts 1 token per 2 characters: nothing like any local estimate.
      const n = Math.ceil(text.length / 2);
      return json(res, 200, shape === 'vllm' ? { count: n, max_model_len: 4096, tokens: [] } : { tokens: Array.from({ length: n }, (_, i) => i) });
    }
    if (body.stream) {
      return writeSse(res, [`data: ${JSON.stringify(chunk({ role: 'assistant', content: 'abcdefghijklmnopqrstuvwxyz0123' }, 'stop'))}\n\n`, 'data: [DONE]\n\n']);
    }
    json(res, 200, completionBody('abcdefghijklmnopqrstuvwxyz0123', { usage: undefined }));
  });
  return { up, calls };
}

for (const shape of ['vllm', 'llamacpp'] as const) {
  t.test(`tokenizer: upstream asks the server (${shape} shape), once per text`, async (t) => {
    const { up, calls } = await tokenizingUpstream(shape);
    const c = baseConfig();
    c.providers.up = { kind: 'openai', base_url: up.baseUrl };
    c.models.push({ id: 'srv', provider: 'up', upstream_model: 'qwen2-7b', tokenizer: 'upstream', max_output_tokens: 10 });
    const gw = await startGateway(c);
    t.teardown(async () => { await gw.close(); await up.close(); });
    const system = 'You are a careful assistant who answers briefly.';
    const question = 'What is the capital of France, please?';
    const res = await postChat(gw.url, { model: 'srv', messages: [{ role: 'system', content: system }, { role: 'user', content: question }] }, auth);
    t.equal(res.status, 200);
    const usage = res.json().usage;
    t.equal(usage.prompt_tokens, 3 + 3 + Math.ceil(system.length / 2) + 3 + Math.ceil(question.length / 2), 'the server counted each message');
    t.equal(usage.completion_tokens, 15, 'the answer counted by the server too (30 characters)');
    t.same(calls.sort(), [system, question, 'abcdefghijklmnopqrstuvwxyz0123'].sort());
    t.equal(up.requests.find((r) => r.url === '/tokenize')!.body.model, 'qwen2-7b');

    const second = await postChat(gw.url, { model: 'srv', stream: true, messages: [{ role: 'system', content: system }, { role: 'user', content: question }, { role: 'assistant', content: 'Paris.' }, { role: 'user', content: 'And the capital of Italy?' }] }, auth);
    t.ok(sseData(second.text).done);
    t.same(calls.slice(3), ['And the capital of Italy?'], 'earlier turns came from the cache; "Paris." is too short to ask about');
  });
}

t.test('tokenizer: upstream falls back to the local estimate when the server is slow or says no', async (t) => {
  for (const [name, opts] of [['slow', { delayMs: 1000 }], ['404', { status: 404 }]] as const) {
    const { up, calls } = await tokenizingUpstream('vllm', opts);
    const c = baseConfig();
    c.providers.up = { kind: 'openai', base_url: up.baseUrl, tokenize_timeout_ms: 100 };
    c.models.push({ id: 'srv', provider: 'up', tokenizer: 'upstream', max_output_tokens: 10 });
    const gw = await startGateway(c);
    const question = 'What is the capital of France, please?';
    const started = Date.now();
    const res = await postChat(gw.url, { model: 'srv', messages: [{ role: 'user', content: question }] }, auth);
    t.equal(res.status, 200, name);
    t.ok(Date.now() - started < 900, `${name}: the request did not wait for the server's count`);
    t.equal(res.json().usage.prompt_tokens, 3 + 3 + counter('o200k_base')(question), `${name}: estimated with o200k_base`);
    t.ok(calls.length >= 1, `${name}: the server was asked`);
    await gw.close();
    await up.close();
  }
});
