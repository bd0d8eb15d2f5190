// The built-in `echo` provider: answers with the last user message, word by word when
// streaming, with real token counts (plain-text completions: completions.ts); embeds, scores and
// transcribes deterministically. The out-of-the-box upstream and an operator's smoke test.

import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ChatMessage, ChunkChoice, CompletionChoice, FinishReason, Usage } from '../../hub/chat.js';
import type { ProviderConfig } from '../../config/types.js';
import { GatewayError } from '../../errors.js';
import { countEach, countUpTo, promptParts } from '../../tokens/count.js';
import { Slice } from '../../slice.js';
import { Fleet } from '../../upstream/balance/index.js';
import { plainAnswers, plainChoices, plainParts } from './completions.js';
import { echoWords } from './words.js';
import { echoTranscript } from './transcript.js';
import type { CompletionResult, EmbedInput, EmbedResult, Provider, ProviderCall, RerankInput, RerankResult, StreamPart, TranscribeInput, TranscribeResult, UpstreamStream } from '../types.js';

function lastUserText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (Array.isArray(m.content)) return m.content.map((p) => (p.type === 'text' ? p.text : '')).filter(Boolean).join(' ');
  }
  return '';
}

/** The echo provider's vector length when the request names none. */
export const ECHO_DIMENSIONS = 256;

/**
 * A deterministic unit vector for `input`: SHA-256 in counter mode, seeded by the input (and
 * the model, so two echo models differ), read as signed 16-bit values, then normalized. The
 * same input always gives the same vector; different inputs are all but orthogonal.
 */
export function echoVector(model: string, input: string | number[], dimensions: number): number[] {
  const seed = createHash('sha256').update(model).update('\u0000').update(typeof input === 'string' ? `s${input}` : `t${input.join(',')}`).digest();
  const v = new Array<number>(dimensions);
  let norm = 0;
  for (let block = 0; block * 16 < dimensions; block++) {
    const bytes = createHash('sha256').update(seed).update(String(block)).digest();
    for (let j = 0; j < 16 && block * 16 + j < dimensions; j++) {
      const x = bytes.readInt16LE(j * 2) / 32768;
      v[block * 16 + j] = x;
      norm += x * x;
    }
  }
  const scale = norm === 0 ? 0 : 1 / Math.sqrt(norm);
  for (let i = 0; i < dimensions; i++) v[i] = v[i]! * scale;
  return v;
}

/** Shared words over all words of two texts (0 when neither has any): a deterministic relevance. */
export function overlap(a: string, b: string): number {
  return jaccard(wordSet(a), wordSet(b));
}

function wordSet(t: string): Set<string> {
  return new Set(t.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? []);
}

function jaccard(x: Set<string>, y: Set<string>): number {
  let shared = 0;
  for (const w of x) if (y.has(w)) shared++;
  const all = x.size + y.size - shared;
  return all === 0 ? 0 : shared / all;
}

interface Answer { words: string[]; finish: FinishReason; usage: Usage }

/** The answer: the last user message's words (words.ts), with real token counts. */
async function answer(call: ProviderCall): Promise<Answer> {
  const text = lastUserText(call.request.messages) || '(no user message)';
  const { words, finish, completion } = echoWords(text, call.model.tokenizer, call.request.maxOutputTokens ?? call.model.max_output_tokens);
  const { fixed, texts } = promptParts(call.request.messages, call.model.image_tokens);
  const prompt = await countUpTo(call.model.tokenizer, texts, fixed, Infinity);
  return { words, finish, usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } };
}

export class EchoProvider implements Provider {
  readonly name: string;
  readonly config: ProviderConfig;
  /** One replica (the process itself), balanced like any other provider's. */
  readonly fleet: Fleet;

  constructor(name: string, config: ProviderConfig, fleet = new Fleet(name, config)) {
    this.name = name;
    this.config = config;
    this.fleet = fleet;
  }

  async complete(call: ProviderCall): Promise<CompletionResult> {
    const prompts = call.request.prompts;
    if (prompts !== undefined) {
      const { answers, usage } = await plainAnswers(call, prompts);
      return { choices: plainChoices(answers), usage, headers: {} };
    }
    const a = await answer(call);
    const choice: CompletionChoice = {
      index: 0,
      message: { role: 'assistant', content: a.words.join(''), refusal: null },
      logprobs: null,
      finish_reason: a.finish,
    };
    return { choices: [choice], usage: a.usage, headers: {} };
  }

  async stream(call: ProviderCall): Promise<UpstreamStream> {
    const delay = this.config.chunk_delay_ms;
    const signal = call.signal;
    const prompts = call.request.prompts;
    if (prompts !== undefined) {
      const { answers, usage } = await plainAnswers(call, prompts);
      const pause = async (): Promise<void> => {
        if (delay <= 0) return;
        try {
          await sleep(delay, undefined, { signal });
        } catch {
          throw new GatewayError('provider_timeout', 'The echo provider was stopped.');
        }
      };
      return Object.assign(plainParts(answers, usage, pause), { headers: {} });
    }
    const a = await answer(call);
    async function* parts(): AsyncGenerator<StreamPart> {
      const first: ChunkChoice = { index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null };
      yield { kind: 'choices', choices: [first] };
      for (const w of a.words) {
        if (delay > 0) {
          try {
            await sleep(delay, undefined, { signal });
          } catch {
            throw new GatewayError('provider_timeout', 'The echo provider was stopped.');
          }
        }
        yield { kind: 'choices', choices: [{ index: 0, delta: { content: w }, finish_reason: null }] };
      }
      yield { kind: 'choices', choices: [{ index: 0, delta: {}, finish_reason: a.finish }] };
      yield { kind: 'usage', usage: a.usage };
    }
    return Object.assign(parts(), { headers: {} });
  }

  async embed(call: ProviderCall, e: EmbedInput): Promise<EmbedResult> {
    // Runs in the gateway's process: many inputs are one job that gives the event loop back.
    const slice = new Slice();
    const counted = await countEach(call.model.tokenizer, e.input.filter((x): x is string => typeof x === 'string'), Infinity, slice);
    let tokens = 0;
    for (const n of counted) tokens += n;
    const dims = e.dimensions ?? ECHO_DIMENSIONS;
    const vectors: number[][] = [];
    for (const x of e.input) {
      if (typeof x !== 'string') tokens += x.length;
      vectors.push(echoVector(call.upstreamModel, x, dims));
      const pause = slice.pause(typeof x === 'string' ? x.length : x.length * 4);
      if (pause !== undefined) await pause;
    }
    return { vectors, promptTokens: tokens, headers: {} };
  }

  /**
   * Scores each pair by the overlap of its words (Jaccard: shared / all, lowercased), so that a
   * document sharing the query's words ranks first; tokens as the gateway counts them.
   */
  async rerank(call: ProviderCall, r: RerankInput): Promise<RerankResult> {
    // Runs in the gateway's process: many pairs are one job that gives the event loop back.
    const slice = new Slice();
    const texts = [...new Set(r.pairs.flat())];
    const counted = await countEach(call.model.tokenizer, texts, Infinity, slice);
    const counts = new Map(texts.map((x, i) => [x, counted[i]!]));
    // The first text's words are kept while it stays the same (rerank's query: every pair).
    let first: { text: string; words: Set<string> } | undefined;
    let tokens = 0;
    const scores: Array<{ index: number; score: number }> = [];
    for (let index = 0; index < r.pairs.length; index++) {
      const [a, b] = r.pairs[index]!;
      tokens += counts.get(a)! + counts.get(b)!;
      if (first?.text !== a) first = { text: a, words: wordSet(a) };
      scores.push({ index, score: jaccard(first.words, wordSet(b)) });
      const pause = slice.pause(a.length + b.length);
      if (pause !== undefined) await pause;
    }
    return { scores, totalTokens: tokens, headers: {} };
  }

  /** A transcript in the format asked for: the form's prompt, else the audio's length (./transcript.ts). */
  async transcribe(_call: ProviderCall, a: TranscribeInput): Promise<TranscribeResult> {
    return echoTranscript(a);
  }

  async close(): Promise<void> {}
}
