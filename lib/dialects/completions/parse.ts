// A legacy completions body (POST /v1/completions, CONTRACT section 14) -> the internal request:
// its plain-text prompts (string or strings; token-id arrays are refused, see docs/dialects.md),
// the suffix, n and echo as PlainPrompts, and the prompts and suffix also as user turns, so the
// content policy and prefix affinity read them as any conversation's. The body itself goes on
// as `native`: an OpenAI-compatible upstream gets it as sent, model rewritten.

import { isObject } from '../../objects.js';
import { badValue, checkBoolean, checkInteger, checkIncludeUsage, checkNumber, checkStop, missing, wrongType } from '../../hub/params.js';
import type { ChatMessage, ChatRequest } from '../../hub/chat.js';

/** The dialect's name, as `native.dialect` carries it to the providers. */
export const COMPLETIONS = 'completions';

/** OpenAI's default output limit for a completion that names none (made explicit upstream). */
export const DEFAULT_MAX_TOKENS = 16;
/** OpenAI's cap on n. */
const MAX_N = 128;
/**
 * Answers (prompts x n) one request may ask for: each is held at the output limit, and the echo
 * provider builds each; far past what a code-completion client sends.
 */
export const MAX_ANSWERS = 2048;

/**
 * Two names for one number: the OpenAI field and the alias llama.cpp's server reads first
 * (n_predict before max_tokens, n_cmpl before n). Validated alike; the alias alone stands for
 * the field; both differing are refused, naming the alias (the upstream would obey it, not the
 * figure the hold was sized for). The alias is never forwarded (providers/openai/completions.ts).
 */
function aliased(body: Record<string, unknown>, key: string, alias: string, min: number, max?: number): number | undefined {
  const v = checkInteger(body, key, min, max);
  const a = checkInteger(body, alias, min, max);
  if (v !== undefined && a !== undefined && v !== a) throw badValue(alias, `must equal '${key}' when both are given (${a} and ${v}): '${alias}' is another name for '${key}'`);
  return v ?? a;
}

/** `prompt`: a string or a non-empty array of strings. */
function prompts(v: unknown): string[] {
  if (v === undefined || v === null) throw missing('prompt');
  if (typeof v === 'string') return [v];
  if (!Array.isArray(v)) throw wrongType('prompt', 'a string or an array of strings');
  if (v.length === 0) throw badValue('prompt', 'must contain at least one prompt');
  for (let i = 0; i < v.length; i++) {
    // A token-id prompt ([1, 2, 3] or [[1, 2], [3]]) is refused here: the gateway could neither
    // check its content nor count it with the model's tokenizer.
    if (typeof v[i] !== 'string') throw wrongType(Array.isArray(v[i]) || typeof v[i] === 'number' ? 'prompt' : `prompt[${i}]`, 'a string or an array of strings (token ids are not accepted)');
  }
  return v as string[];
}

/** Validates the body of POST /v1/completions. */
export function parseCompletions(body: unknown): ChatRequest {
  if (!isObject(body)) throw wrongType('(body)', 'a JSON object');
  if (body.model === undefined) throw missing('model');
  if (typeof body.model !== 'string') throw wrongType('model', 'a string');
  if (body.model === '') throw badValue('model', 'must not be empty');
  const texts = prompts(body.prompt);
  const suffix = body.suffix;
  if (suffix !== undefined && suffix !== null && typeof suffix !== 'string') throw wrongType('suffix', 'a string');

  const maxTokens = aliased(body, 'max_tokens', 'n_predict', 1);
  const limit = maxTokens ?? DEFAULT_MAX_TOKENS;
  // vLLM's min_tokens above the limit would be the server's 400; refused here, before the hold.
  const minTokens = checkInteger(body, 'min_tokens', 0);
  if (minTokens !== undefined && minTokens > limit) throw badValue('min_tokens', `must be at most the output limit (${limit})`);
  checkNumber(body, 'temperature', 0, 2);
  checkNumber(body, 'top_p', 0, 1);
  checkNumber(body, 'presence_penalty', -2, 2);
  checkNumber(body, 'frequency_penalty', -2, 2);
  const n = aliased(body, 'n', 'n_cmpl', 1, MAX_N) ?? 1;
  // best_of: the server generates that many answers per prompt and returns the n best; each is
  // held like one of n (CONTRACT section 21), and charged as the server reports them
  // (providers/choices-usage.ts: the dropped ones are never seen).
  const bestOf = checkInteger(body, 'best_of', 1, MAX_N) ?? 1;
  const generated = Math.max(n, bestOf);
  checkInteger(body, 'seed', Number.MIN_SAFE_INTEGER);
  // Completions' logprobs is a count (of the likeliest tokens per position), not chat's boolean;
  // OpenAI caps it at 5, model servers at their own limits (CONTRACT section 10): theirs to enforce.
  checkInteger(body, 'logprobs', 0);
  const echo = checkBoolean(body, 'echo') ?? false;
  const stream = checkBoolean(body, 'stream') ?? false;
  checkStop(body);
  if (body.logit_bias !== undefined && body.logit_bias !== null && !isObject(body.logit_bias)) throw wrongType('logit_bias', 'an object');
  if (body.user !== undefined && body.user !== null && typeof body.user !== 'string') throw wrongType('user', 'a string');
  const includeUsage = checkIncludeUsage(body);
  if (texts.length * generated > MAX_ANSWERS) {
    const nName = (body.n ?? null) === null && (body.n_cmpl ?? null) !== null ? 'n_cmpl' : 'n';
    const param = generated > n ? 'best_of' : nName;
    throw badValue(param, `the prompts times ${param} must be at most ${MAX_ANSWERS}`);
  }

  const messages: ChatMessage[] = texts.map((content) => ({ role: 'user', content }));
  if (typeof suffix === 'string' && suffix !== '') messages.push({ role: 'user', content: suffix });
  return {
    model: body.model,
    messages,
    stream,
    includeUsage: stream && includeUsage,
    maxOutputTokens: limit,
    imageCount: 0,
    body,
    native: { dialect: COMPLETIONS, body, headers: {} },
    prompts: { texts, suffix: typeof suffix === 'string' ? suffix : '', n, echo },
    answers: texts.length * generated,
  };
}
