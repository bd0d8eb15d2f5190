// A fake llama.cpp `llama-server` on a real socket, speaking its wire as tools/server of the
// release `npm run test:real` builds writes it: GET /props (its settings, n_ctx per slot),
// GET /v1/models (owned_by "llamacpp"), POST /v1/chat/completions and /v1/completions, whole or
// streamed. One task per answer (n per prompt, each prompt of an array), each with its own
// usage: a whole answer is the first task's object with the other tasks' choices appended (its
// usage and timings the first task's alone); a stream carries each task's usage and timings on
// that task's last event (chat: on the usage chunk, when include_usage). Every answer and chunk
// is named `chatcmpl-…`, completions too. A stop string ends a task (`stopping_word`, named only
// in `__verbose`, sent when the request says verbose: true); `best_of` is taken and ignored. Tokens are
// generated one every `tokenMs`; a streamed task stops when its client leaves, a whole one runs
// to its end whatever the client does (as llama.cpp did for the attack: 1,500 of 1,500 tokens
// decoded after the client left): `work` tells what each request decoded, and after its close.

import { setTimeout as sleep } from 'node:timers/promises';
import { json, startUpstream, type FakeUpstream, type SeenRequest } from './upstream.js';

/** Words the model says, each one token (with o200k_base too: common English words after a space). */
export const WORDS = [' the', ' cat', ' sat', ' on', ' a', ' warm', ' mat', ' and', ' then', ' it', ' slept', ' all', ' day'];
export const TIMINGS = { cache_n: 0, prompt_n: 9, prompt_ms: 1.5, predicted_n: 3, predicted_ms: 4.5 };
export const PROPS = {
  default_generation_settings: { n_ctx: 4096, params: { n_predict: -1 } }, total_slots: 2, model_path: '/models/tiny.gguf',
  chat_template: '{{ messages }}', build_info: 'b7000-de3ff81',
};

export interface LlamaFakeOptions {
  /** ms between two generated tokens of one task (0: as fast as the event loop goes). */
  tokenMs?: number;
  /** What GET /props does: answer (after `propsDelayMs`), hang until the client leaves, or answer this status. */
  props?: 'ok' | 'hang' | number;
  propsDelayMs?: number;
}

/** What one generation request made the server do. */
export interface Work {
  request: SeenRequest;
  stream: boolean;
  /** Tokens decoded, over all its tasks. */
  decoded: number;
  /** Of those, decoded after the client closed the connection. */
  afterClose: number;
  /** Every task ran to its end. */
  finished: boolean;
  /** The server is done with the request (its tasks ended or were cancelled). */
  ended: boolean;
}

export interface LlamaFake extends FakeUpstream {
  options: LlamaFakeOptions;
  work: Work[];
}

/** The text and the tokens of answer `k` of a task, max_tokens long unless a stop string ends it. */
export function generation(k: number, maxTokens: number, stop: string[]): { tokens: string[]; decoded: number; stoppingWord: string } {
  const tokens: string[] = [];
  let text = '';
  for (let i = 0; i < maxTokens; i++) {
    const tok = WORDS[(k * 3 + i) % WORDS.length]!;
    const next = text + tok;
    const hit = stop.find((s) => s !== '' && next.includes(s));
    if (hit !== undefined) {
      const cut = next.slice(text.length, next.indexOf(hit));
      if (cut !== '') tokens.push(cut);
      return { tokens, decoded: i + 1, stoppingWord: hit };
    }
    tokens.push(tok);
    text = next;
  }
  return { tokens, decoded: maxTokens, stoppingWord: '' };
}

/** Prompt tokens as the fake counts them: one per word, plus its template's framing. */
export function promptTokens(text: string, framing: number): number {
  return text.split(/\s+/).filter((w) => w !== '').length + framing;
}

function chatPrompt(messages: any[]): number {
  return promptTokens(messages.map((m) => (typeof m.content === 'string' ? m.content : '')).join(' '), 4 * messages.length);
}

interface Task { index: number; prompt: number; gen: ReturnType<typeof generation> }

function usage(task: Task, sent: number) {
  return { completion_tokens: sent, prompt_tokens: task.prompt, total_tokens: task.prompt + sent, prompt_tokens_details: { cached_tokens: 0 } };
}

const FP = 'b7000-de3ff81';

export async function startLlamaFake(options: LlamaFakeOptions = {}): Promise<LlamaFake> {
  const work: Work[] = [];
  let seq = 0;
  const up = await startUpstream(async (req, res, body, seen) => {
    if (req.method === 'GET' && req.url === '/health') return json(res, 200, { status: 'ok' });
    if (req.method === 'GET' && req.url === '/props') {
      if (options.props === 'hang') return new Promise<void>((resolve) => res.on('close', () => resolve()));
      if (options.propsDelayMs) await sleep(options.propsDelayMs);
      if (typeof options.props === 'number') return json(res, options.props, { error: { code: options.props, message: 'Loading model', type: 'unavailable_error' } });
      return json(res, 200, PROPS);
    }
    if (req.method === 'GET' && req.url === '/v1/models') {
      return json(res, 200, { object: 'list', data: [{ id: 'tiny.gguf', object: 'model', created: 1, owned_by: 'llamacpp', meta: { n_ctx_train: 32768 } }] });
    }
    const chat = req.url === '/v1/chat/completions';
    if (req.method !== 'POST' || (!chat && req.url !== '/v1/completions')) return json(res, 404, { error: { code: 404, message: 'File Not Found', type: 'not_found_error' } });
    const id = `chatcmpl-fake${++seq}`;
    const stop: string[] = typeof body.stop === 'string' ? [body.stop] : Array.isArray(body.stop) ? body.stop : [];
    const n = typeof body.n === 'number' ? body.n : 1;
    const maxTokens = typeof body.max_tokens === 'number' ? body.max_tokens : 16;
    const prompts: string[] = chat ? [''] : Array.isArray(body.prompt) ? body.prompt : [body.prompt];
    const tasks: Task[] = [];
    prompts.forEach((p, pi) => {
      for (let j = 0; j < n; j++) {
        tasks.push({ index: pi * n + j, prompt: chat ? chatPrompt(body.messages) : promptTokens(p, 1), gen: generation(pi * n + j, maxTokens, stop) });
      }
    });
    const w: Work = { request: seen, stream: body.stream === true, decoded: 0, afterClose: 0, finished: false, ended: false };
    work.push(w);
    const object = chat ? 'chat.completion' : 'text_completion';
    const head = { created: 1700000000, model: 'tiny.gguf', system_fingerprint: FP };
    // Every task decodes one token per step, side by side, as llama.cpp's slots do.
    const steps = Math.max(...tasks.map((t) => t.gen.decoded));
    const stopType = (t: Task) => (t.gen.stoppingWord !== '' ? 'word' : t.gen.decoded < maxTokens ? 'eos' : 'limit');
    const finish = (t: Task) => (stopType(t) === 'limit' ? 'length' : 'stop');
    const verbose = (t: Task) => ({ index: t.index, content: t.gen.tokens.join(''), stop: true, stop_type: stopType(t), stopping_word: t.gen.stoppingWord, tokens_predicted: t.gen.decoded });

    if (body.stream !== true) {
      for (let s = 0; s < steps; s++) {
        if (options.tokenMs) await sleep(options.tokenMs);
        for (const t of tasks) {
          if (s >= t.gen.decoded) continue;
          w.decoded++;
          if (seen.aborted) w.afterClose++;
        }
      }
      w.finished = true;
      w.ended = true;
      if (res.destroyed) return;
      const first = tasks[0]!;
      const choices = tasks.map((t) => (chat
        ? { finish_reason: finish(t), index: t.index, message: { role: 'assistant', content: t.gen.tokens.join('') } }
        : { text: t.gen.tokens.join(''), index: t.index, logprobs: null, finish_reason: finish(t) }));
      const answer: any = { choices, ...head, object, usage: usage(first, first.gen.decoded), id };
      if (body.verbose === true) answer.__verbose = verbose(first);
      answer.timings = TIMINGS;
      return json(res, 200, answer);
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'keep-alive': 'timeout=5, max=100', server: 'llama.cpp' });
    const send = (data: unknown) => { if (!res.destroyed) res.write(`data: ${JSON.stringify(data)}\n\n`); };
    const chunk = (choice: unknown, extra: Record<string, unknown> = {}) => (chat
      ? { choices: [choice], ...head, object: 'chat.completion.chunk', id, ...extra }
      : { choices: [choice], ...head, object, id, ...extra });
    if (chat) for (const t of tasks) send(chunk({ finish_reason: null, index: t.index, delta: { role: 'assistant', content: null } }));
    for (let s = 0; s < steps; s++) {
      if (options.tokenMs) await sleep(options.tokenMs);
      if (res.destroyed) { w.ended = true; return; } // llama.cpp cancels a streamed task when its client leaves
      for (const t of tasks) {
        if (s >= t.gen.decoded) continue;
        w.decoded++;
        const tok = t.gen.tokens[s];
        if (tok !== undefined) send(chunk(chat ? { finish_reason: null, index: t.index, delta: { content: tok } } : { text: tok, index: t.index, logprobs: null, finish_reason: null }));
        if (s !== t.gen.decoded - 1) continue;
        // The task's last events: the finish (verbose on its first), then its usage.
        const v = body.verbose === true ? { __verbose: verbose(t) } : {};
        if (chat) {
          send(chunk({ finish_reason: finish(t), index: t.index, delta: {} }, v));
          if (body.stream_options?.include_usage === true) send({ choices: [], ...head, object: 'chat.completion.chunk', id, usage: usage(t, t.gen.decoded), timings: TIMINGS });
        } else {
          send(chunk({ text: '', index: t.index, logprobs: null, finish_reason: finish(t) }, { usage: usage(t, t.gen.decoded), ...v, timings: TIMINGS }));
        }
      }
    }
    w.finished = true;
    w.ended = true;
    if (!res.destroyed) res.end('data: [DONE]\n\n');
  }, { props: true });
  return Object.assign(up, { options, work });
}
