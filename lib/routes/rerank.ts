// POST /v1/rerank and POST /v1/score, for `type: rerank` models: metered as embeddings are
// (pipeline/unary.ts: plan gating, content policy, limits and the hold, the model's targets
// with fallbacks and circuits, one debit; the context check per pair here), charged input_per_mtok on
// the upstream's usage.total_tokens (else its prompt_tokens, else the gateway's count: each
// pair's two texts). Scores come from the target provider's `rerank`; the wire formats are
// dialects/rerank.

import { authenticateMetered } from '../pipeline/admit.js';
import type { Exchange } from '../pipeline/context.js';
import { unaryCall, unaryModel, unaryRequest } from '../pipeline/unary.js';
import { GatewayError } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { userOf } from '../auth/attribution.js';
import { parseRerank, parseScore, renderRerank, renderScore } from '../dialects/rerank/index.js';

export async function serveRerank(route: 'rerank' | 'score', x: Exchange): Promise<void> {
  const { state, ctx, req } = x;
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const body = await readJsonBody(req, state.config.server);
  const r = route === 'rerank' ? parseRerank(body) : parseScore(body);
  const model = unaryModel(x, r.model, 'rerank');
  const request = unaryRequest(x, r.model, r.texts, userOf(body));
  // Each text counted no further than the model could take, as one job that gives the event
  // loop back (CONTRACT section 21; a repeated text is remembered, not counted again); a pair
  // is its two.
  const counted = await state.textsTokens(r.texts, model, model.context_window);
  const counts = new Map<string, number>();
  for (let i = 0; i < r.texts.length; i++) counts.set(r.texts[i]!, counted[i]!);
  let prompt = 0;
  for (let i = 0; i < r.pairs.length; i++) {
    const [a, b] = r.pairs[i]!;
    const n = counts.get(a)! + counts.get(b)!;
    if (n > model.context_window) {
      throw new GatewayError('context_length_exceeded',
        `Pair ${i} has at least ${n} tokens; the model '${model.id}' takes at most ${model.context_window}.`,
        { param: route === 'rerank' ? `documents[${i}]` : 'text_2' });
    }
    prompt += n;
  }
  await unaryCall(x, model, {
    request, prompt, verb: route,
    serve: (provider, call) => provider.rerank?.(call, r),
    tokens: (result) => result.totalTokens,
    answer: async (result, tokens) => ({
      body: route === 'rerank' ? await renderRerank(r, model.id, result.scores, tokens) : await renderScore(model.id, result.scores, tokens),
      type: 'application/json', headers: result.headers,
    }),
  });
}
