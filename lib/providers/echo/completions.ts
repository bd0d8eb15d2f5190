// The echo provider's plain-text completions (POST /v1/completions): deterministic, so a client
// and the tests can see what reached the provider. Each prompt is answered with its own words
// and then the suffix's (fill-in-the-middle: what comes after), n times, as many words as the
// output limit takes; with `echo` the prompt comes first in each text. Usage as the gateway
// counts it: each prompt with the suffix as plain text, and the generated words (not the echo).

import type { ChunkChoice, CompletionChoice, FinishReason, PlainPrompts, Usage } from '../../hub/chat.js';
import { countUpTo } from '../../tokens/count.js';
import type { ProviderCall, StreamPart } from '../types.js';
import { echoWords } from './words.js';

interface PlainAnswer { index: number; echo: string; words: string[]; finish: FinishReason }

export async function plainAnswers(call: ProviderCall, prompts: PlainPrompts): Promise<{ answers: PlainAnswer[]; usage: Usage }> {
  const tokenizer = call.model.tokenizer;
  const limit = call.request.maxOutputTokens ?? call.model.max_output_tokens;
  const suffix = prompts.suffix === '' ? 0 : await countUpTo(tokenizer, [prompts.suffix], 0, Infinity);
  const answers: PlainAnswer[] = [];
  let prompt = 0;
  let completion = 0;
  for (let p = 0; p < prompts.texts.length; p++) {
    const text = prompts.texts[p]!;
    prompt += suffix + await countUpTo(tokenizer, [text], 0, Infinity);
    const source = prompts.suffix === '' ? text : `${text} ${prompts.suffix}`;
    const w = echoWords(source.trim() === '' ? '(empty prompt)' : source, tokenizer, limit);
    for (let j = 0; j < prompts.n; j++) {
      answers.push({ index: p * prompts.n + j, echo: prompts.echo ? text : '', words: w.words, finish: w.finish });
      completion += w.completion;
    }
  }
  return { answers, usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion } };
}

export function plainChoices(answers: readonly PlainAnswer[]): CompletionChoice[] {
  return answers.map((a) => ({
    index: a.index, message: { role: 'assistant', content: a.echo + a.words.join(''), refusal: null }, logprobs: null, finish_reason: a.finish,
  }));
}

/** A stream's parts: each answer's echo, then its words one by one, then its finish; then the usage. */
export async function* plainParts(answers: readonly PlainAnswer[], usage: Usage, pause: () => Promise<void>): AsyncGenerator<StreamPart> {
  for (const a of answers) {
    if (a.echo !== '') yield { kind: 'choices', choices: [{ index: a.index, delta: { content: a.echo }, finish_reason: null }] };
    for (const w of a.words) {
      await pause();
      yield { kind: 'choices', choices: [{ index: a.index, delta: { content: w }, finish_reason: null }] };
    }
    const last: ChunkChoice = { index: a.index, delta: { content: '' }, finish_reason: a.finish };
    yield { kind: 'choices', choices: [last] };
  }
  yield { kind: 'usage', usage };
}
