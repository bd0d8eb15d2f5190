// POST {base_url}/embeddings on an OpenAI-compatible server (vLLM, llama.cpp, Ollama, TEI's
// OpenAI route, OpenAI itself). Floats are asked for whatever the client wants: the gateway
// encodes base64 itself, so every upstream answers in one shape.

import { GatewayError } from '../../errors.js';
import { encodeSliced } from '../../slice.js';
import type { HttpProvider } from '../http-provider.js';
import { isObj, parseJson, tokenCount } from '../shared.js';
import type { EmbedInput, EmbedResult, ProviderCall } from '../types.js';

/** Largest embeddings answer read (2048 inputs of 3072 floats as text fit). */
const MAX_ANSWER_BYTES = 256 * 1024 * 1024;

export async function embedOpenAI(provider: HttpProvider, call: ProviderCall, e: EmbedInput): Promise<EmbedResult> {
  const body: Record<string, unknown> = { model: call.upstreamModel, input: e.input, encoding_format: 'float' };
  if (e.dimensions !== undefined) body.dimensions = e.dimensions;
  if (e.user !== undefined) body.user = e.user;
  // Made in slices: 2,048 inputs are tens of MB of JSON (CONTRACT section 21).
  const { text: answerText, headers } = await provider.postJson(call, '/embeddings', await encodeSliced(body), MAX_ANSWER_BYTES);
  const answer = parseJson(answerText);
  if (!isObj(answer) || !Array.isArray(answer.data)) throw new GatewayError('provider_error', 'The model provider sent an embeddings answer without data.');
  const vectors: number[][] = new Array(e.input.length);
  for (const d of answer.data) {
    const index = isObj(d) ? d.index : undefined;
    const v = isObj(d) ? d.embedding : undefined;
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= e.input.length || !Array.isArray(v) ||
      !v.every((x) => typeof x === 'number' && Number.isFinite(x))) {
      throw new GatewayError('provider_error', 'The model provider sent an invalid embedding.');
    }
    vectors[index] = v as number[];
  }
  for (let i = 0; i < vectors.length; i++) {
    if (vectors[i] === undefined) throw new GatewayError('provider_error', 'The model provider sent fewer embeddings than inputs.');
  }
  const usage = isObj(answer.usage) ? tokenCount(answer.usage.prompt_tokens) : undefined;
  return { vectors, promptTokens: usage, headers };
}
