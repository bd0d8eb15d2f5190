// The built-in `echo` provider: answers with the last user message, word by word when
// streaming, with real token counts. The out-of-the-box upstream and an operator's smoke test.

import { setTimeout as sleep } from 'node:timers/promises';
import type { ChatMessage, ChunkChoice, CompletionChoice, FinishReason, Usage } from '../../chat/types.js';
import type { ProviderConfig } from '../../config/types.js';
import { GatewayError } from '../../errors.js';
import { counter, estimatePromptTokens } from '../../tokens/count.js';
import { Fleet } from '../../upstream/balance/index.js';
import type { CompletionResult, Provider, ProviderCall, StreamPart, UpstreamStream } from '../types.js';

function lastUserText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role !== 'user') continue;
    if (typeof m.content === 'string') return m.content;
    if (Array.isArray(m.content)) return m.content.map((p) => (p.type === 'text' ? p.text : '')).filter(Boolean).join(' ');
  }
  return '';
}

interface Answer { words: string[]; finish: FinishReason; usage: Usage }

function answer(call: ProviderCall): Answer {
  const count = counter(call.model.tokenizer);
  const text = lastUserText(call.request.messages) || '(no user message)';
  const limit = call.request.maxOutputTokens ?? call.model.max_output_tokens;
  // Words keep their leading space so that the deltas concatenate back into the text.
  const all = text.match(/\s*\S+/g) ?? [text];
  const words: string[] = [];
  let completion = 0;
  let finish: FinishReason = 'stop';
  for (const w of all) {
    const n = count(w);
    if (completion + n > limit) { finish = 'length'; break; }
    words.push(w);
    completion += n;
  }
  const prompt = estimatePromptTokens(call.request.messages, count, call.model.image_tokens);
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
    const a = answer(call);
    const choice: CompletionChoice = {
      index: 0,
      message: { role: 'assistant', content: a.words.join(''), refusal: null },
      logprobs: null,
      finish_reason: a.finish,
    };
    return { choices: [choice], usage: a.usage, headers: {} };
  }

  async stream(call: ProviderCall): Promise<UpstreamStream> {
    const a = answer(call);
    const delay = this.config.chunk_delay_ms;
    const signal = call.signal;
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

  async close(): Promise<void> {}
}
