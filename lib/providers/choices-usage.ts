// Usage that covers every choice of an answer with several (issue #40): llama.cpp runs one task
// per choice and reports each task's usage on its own (in a stream, on each choice's last
// event; in a whole answer, only the first task's, the others' choices appended to it), so a
// request with n: 2 was charged for one choice. In order:
// - a stream whose server reports usage per choice has the reports added up (PerChoiceUsage):
//   every choice's completion tokens, each prompt's tokens once: the server's own figures;
// - a whole answer of llama.cpp's keeps its first choice's figures and counts the others (their
//   text, with the model's tokenizer; the prompts after the first, as the hold counted them);
// - any other answer of several choices is charged at least the completion tokens they hold,
//   counted: a server whose usage says fewer left some choices out.
// `best_of` (held like n: dialects/completions) is charged as the server reports it: the
// candidates it drops are never seen, and servers differ (OpenAI's usage counts them, llama.cpp
// ignores best_of and generates n). Costs nothing for an answer of one choice: none of it runs.

import type { ChunkChoice, CompletionChoice, Usage } from '../hub/chat.js';
import { merged } from '../objects.js';
import type { ProviderCall, StreamPart, UpstreamStream } from './types.js';

export type Count = (text: string) => Promise<number>;

/** Does a stream of this call need its choices' text kept (several answers asked)? */
export function coversStream(call: ProviderCall): boolean {
  const p = call.request.prompts;
  return p !== undefined && p.texts.length * p.n > 1;
}

/** What a choice holds that was generated: its text, reasoning and tool-call arguments. */
function choiceText(c: CompletionChoice): string {
  let text = (c.message.reasoning_content ?? '') + (c.message.content ?? '');
  for (const t of c.message.tool_calls ?? []) text += t.function.arguments;
  return text;
}

async function counted(texts: readonly string[], count: Count): Promise<number> {
  let n = 0;
  for (const t of texts) if (t !== undefined && t !== '') n += await count(t);
  return n;
}

/**
 * `usage` raised where its completion tokens fall short of what `texts` hold, counted;
 * unchanged otherwise, or when there is none (the pipeline then counts every choice itself).
 */
async function floored(usage: Usage | undefined, texts: readonly string[], count: Count): Promise<Usage | undefined> {
  if (usage === undefined) return undefined;
  const floor = await counted(texts, count);
  if (usage.completion_tokens >= floor) return usage;
  return merged<Usage>(usage, { completion_tokens: floor, total_tokens: usage.prompt_tokens + floor });
}

/**
 * A whole answer's usage, covering its choices (for an answer of several). `firstOnly`: the
 * usage is llama.cpp's, its first choice's alone.
 */
export async function coverWhole<T extends { choices: CompletionChoice[]; usage: Usage | undefined }>(
  result: T, call: ProviderCall, count: Count, firstOnly: boolean,
): Promise<T> {
  const u = result.usage;
  if (firstOnly && u !== undefined) {
    const rest = result.choices.filter((c) => c.index !== 0).map(choiceText);
    const completion = u.completion_tokens + await counted(rest, count);
    // Each prompt after the first, as the hold counted it (its text and the suffix).
    const p = call.request.prompts;
    const others = p === undefined ? [] : p.texts.slice(1).flatMap((text) => (p.suffix === '' ? [text] : [text, p.suffix]));
    const prompt = u.prompt_tokens + await counted(others, count);
    result.usage = merged<Usage>(u, { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion });
    return result;
  }
  result.usage = await floored(u, result.choices.map(choiceText), count);
  return result;
}

/**
 * Usage reported per choice (llama.cpp: one task per choice, each with its own usage), added
 * up: every choice's completion tokens; each prompt's tokens once, from the first choice of
 * its group (the n choices of one prompt share it: indexes prompt x n + j).
 */
export class PerChoiceUsage {
  readonly #perIndex = new Map<number, Usage>();
  /** Per prompt: the usage of its lowest-indexed choice reported so far. */
  readonly #prompts = new Map<number, { index: number; usage: Usage }>();
  readonly #n: number;
  readonly #choices: number;
  #completion = 0;
  #reasoning: number | undefined;

  /** `n` choices per prompt, `choices` in all. */
  constructor(n: number, choices: number) {
    this.#n = Math.max(1, n);
    this.#choices = choices;
  }

  /** Every choice has reported. */
  get complete(): boolean {
    return this.#perIndex.size >= this.#choices;
  }

  /** Takes choice `index`'s usage (a later report for the same choice replaces it); the answer's so far. */
  add(index: number, usage: Usage): Usage {
    const before = this.#perIndex.get(index);
    if (before !== undefined) {
      this.#completion -= before.completion_tokens;
      if (before.reasoning_tokens !== undefined) this.#reasoning! -= before.reasoning_tokens;
    }
    this.#perIndex.set(index, usage);
    this.#completion += usage.completion_tokens;
    if (usage.reasoning_tokens !== undefined) this.#reasoning = (this.#reasoning ?? 0) + usage.reasoning_tokens;
    const group = Math.floor(index / this.#n);
    const first = this.#prompts.get(group);
    if (first === undefined || index <= first.index) this.#prompts.set(group, { index, usage });
    let prompt = 0;
    let cached: number | undefined;
    let writes: number | undefined;
    for (const { usage: u } of this.#prompts.values()) {
      prompt += u.prompt_tokens;
      if (u.cached_tokens !== undefined) cached = (cached ?? 0) + u.cached_tokens;
      if (u.cache_write_tokens !== undefined) writes = (writes ?? 0) + u.cache_write_tokens;
    }
    const out: Usage = { prompt_tokens: prompt, completion_tokens: this.#completion, total_tokens: prompt + this.#completion };
    if (cached !== undefined) out.cached_tokens = cached;
    if (writes !== undefined) out.cache_write_tokens = writes;
    if (this.#reasoning !== undefined) out.reasoning_tokens = this.#reasoning;
    return out;
  }
}

/**
 * A stream whose usage part is held back to its end and floored there (see `floored`) when it
 * had several choices, unless it is the server's own figures for every choice (a usage part
 * marked `perChoice`): each choice's text is kept as it passes. Parts come out as the
 * upstream's do, usage last.
 */
export class CoveredStream implements UpstreamStream, AsyncIterator<StreamPart> {
  readonly headers: Record<string, string>;
  readonly #inner: UpstreamStream;
  readonly #it: AsyncIterator<StreamPart>;
  readonly #texts: string[] = [];
  /** The choices seen, by index. */
  readonly #choices = new Set<number>();
  readonly #count: Count;
  #usage: Extract<StreamPart, { kind: 'usage' }> | undefined;
  #done = false;

  constructor(inner: UpstreamStream, count: Count) {
    this.#inner = inner;
    this.#it = inner[Symbol.asyncIterator]();
    this.headers = inner.headers;
    this.#count = count;
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamPart> {
    return this;
  }

  /** A choices part passes (its text kept); a usage part is held: undefined then. */
  #pass(part: StreamPart): StreamPart | undefined {
    if (part.kind === 'usage') {
      this.#usage = part;
      return undefined;
    }
    for (const c of part.choices) this.#keep(c);
    return part;
  }

  #keep(c: ChunkChoice): void {
    this.#choices.add(c.index);
    const d = c.delta;
    let text = (d.reasoning_content ?? '') + (d.content ?? '');
    for (const t of d.tool_calls ?? []) text += t.function?.arguments ?? '';
    if (text !== '') this.#texts[c.index] = (this.#texts[c.index] ?? '') + text;
  }

  take(): StreamPart | undefined {
    for (;;) {
      const part = this.#inner.take?.();
      if (part === undefined) return undefined;
      const out = this.#pass(part);
      if (out !== undefined) return out;
    }
  }

  async next(): Promise<IteratorResult<StreamPart>> {
    while (!this.#done) {
      const step = await this.#it.next();
      if (step.done === true) {
        this.#done = true;
        const last = this.#usage;
        if (last === undefined) break;
        if (last.perChoice === true || this.#choices.size < 2) return { value: last, done: false };
        const usage = await floored(last.usage, this.#texts, this.#count);
        return { value: { kind: 'usage', usage: usage! }, done: false };
      }
      const out = this.#pass(step.value);
      if (out !== undefined) return { value: out, done: false };
    }
    return { value: undefined, done: true };
  }

  async return(): Promise<IteratorResult<StreamPart>> {
    this.#done = true;
    await this.#it.return?.();
    return { value: undefined, done: true };
  }
}
