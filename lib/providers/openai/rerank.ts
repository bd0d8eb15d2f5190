// POST {base_url}/rerank and {base_url}/score on a server that serves them (vLLM, and the
// Jina/Cohere-shaped rerank of TEI and llama.cpp's server): the client's body passed as sent
// with its model rewritten, and the answer's scores read back, each checked against the request.

import { GatewayError } from '../../errors.js';
import { encodeSliced } from '../../slice.js';
import type { HttpProvider } from '../http-provider.js';
import { isObj, parseJson, tokenCount } from '../shared.js';
import type { ProviderCall, RerankInput, RerankResult } from '../types.js';

/** Largest answer read: 2048 scores with their documents echoed back fit. */
const MAX_ANSWER_BYTES = 64 * 1024 * 1024;

function invalid(route: string): GatewayError {
  return new GatewayError('provider_error', `The model provider sent an invalid ${route} answer.`);
}

export async function rerankOpenAI(provider: HttpProvider, call: ProviderCall, r: RerankInput): Promise<RerankResult> {
  // Fields as sent, in their order; only the model is the upstream's. Made in slices: 2,048
  // documents are 20 MB of JSON (CONTRACT section 21).
  const body = await encodeSliced({ ...r.body, model: call.upstreamModel });
  const { text, headers } = await provider.postJson(call, `/${r.route}`, body, MAX_ANSWER_BYTES);
  const answer = parseJson(text);
  // rerank: results [{index, relevance_score}]; score: data [{index, score}].
  const list = isObj(answer) ? (r.route === 'rerank' ? answer.results : answer.data) : undefined;
  if (!Array.isArray(list)) throw invalid(r.route);
  const seen = new Set<number>();
  const scores: { index: number; score: number }[] = [];
  for (const item of list) {
    const index = isObj(item) ? item.index : undefined;
    const score = isObj(item) ? (r.route === 'rerank' ? item.relevance_score : item.score) : undefined;
    if (typeof index !== 'number' || !Number.isInteger(index) || index < 0 || index >= r.pairs.length || seen.has(index) ||
      typeof score !== 'number' || !Number.isFinite(score)) {
      throw invalid(r.route);
    }
    seen.add(index);
    scores.push({ index, score });
  }
  // A score answers every pair; a rerank at least its top_n (all, without one).
  const wanted = r.route === 'score' ? r.pairs.length : Math.min(r.topN ?? r.pairs.length, r.pairs.length);
  if (scores.length < wanted) throw new GatewayError('provider_error', `The model provider sent fewer ${r.route} results than asked for.`);
  const usage = isObj(answer) && isObj(answer.usage) ? answer.usage : undefined;
  const totalTokens = usage === undefined ? undefined : tokenCount(usage.total_tokens) ?? tokenCount(usage.prompt_tokens);
  return { scores, totalTokens, headers };
}
