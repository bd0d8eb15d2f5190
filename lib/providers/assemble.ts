// A whole answer made from a stream's parts, for a client that did not ask for a stream while
// the upstream was called streaming (providers.NAME.stream_upstream, CONTRACT section 11):
// llama.cpp cancels a generation when its client leaves only for streamed requests, so an
// abandoned non-streaming request would run to max_tokens, unmetered. Streamed, the pipeline's
// abort ends the upstream's work at once.

import type { CompletionChoice, FinishReason, Logprobs, ToolCall, Usage } from '../hub/chat.js';
import { emptyAnswer, isEmptyAnswer } from './shared.js';
import type { CompletionResult, ProviderCall, UpstreamStream } from './types.js';

interface Building {
  content: string;
  reasoning: string;
  refusal: string | null;
  tools: ToolCall[];
  logprobs: unknown[] | null;
  finish: FinishReason | null;
  stopSequence: string | undefined;
}

/** Reads `stream` to its end and returns the answer it told, as a non-streamed call would. */
export async function assemble(stream: UpstreamStream, call: ProviderCall): Promise<CompletionResult> {
  const choices = new Map<number, Building>();
  let usage: Usage | undefined;
  for await (const part of stream) {
    if (part.kind === 'usage') { usage = part.usage; continue; }
    for (const c of part.choices) {
      let b = choices.get(c.index);
      if (b === undefined) {
        b = { content: '', reasoning: '', refusal: null, tools: [], logprobs: null, finish: null, stopSequence: undefined };
        choices.set(c.index, b);
      }
      const d = c.delta;
      if (typeof d.content === 'string') b.content += d.content;
      if (d.reasoning_content !== undefined) b.reasoning += d.reasoning_content;
      if (typeof d.refusal === 'string') b.refusal = (b.refusal ?? '') + d.refusal;
      for (const t of d.tool_calls ?? []) {
        const tool = (b.tools[t.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
        if (t.id !== undefined) tool.id = t.id;
        if (t.function?.name !== undefined) tool.function.name += t.function.name;
        if (t.function?.arguments !== undefined) tool.function.arguments += t.function.arguments;
      }
      const lp = c.logprobs?.content;
      if (Array.isArray(lp)) (b.logprobs ??= []).push(...lp);
      if (c.finish_reason !== null) b.finish = c.finish_reason;
      if (c.stop_sequence !== undefined) b.stopSequence = c.stop_sequence;
    }
  }
  const out: CompletionChoice[] = [...choices].sort((a, b) => a[0] - b[0]).map(([index, b]) => {
    const tools = b.tools.filter((t) => t !== undefined);
    const choice: CompletionChoice = {
      index,
      message: { role: 'assistant', content: b.content === '' && tools.length > 0 ? null : b.content, refusal: b.refusal },
      logprobs: b.logprobs === null ? null : ({ content: b.logprobs, refusal: null } satisfies Logprobs),
      finish_reason: b.finish ?? 'stop',
    };
    if (b.reasoning !== '') choice.message.reasoning_content = b.reasoning;
    if (tools.length > 0) choice.message.tool_calls = tools;
    if (b.stopSequence !== undefined) choice.stop_sequence = b.stopSequence;
    return choice;
  });
  if (out.length === 0 || out.every((c) => isEmptyAnswer(c, call))) throw emptyAnswer();
  return { choices: out, usage, headers: stream.headers };
}
