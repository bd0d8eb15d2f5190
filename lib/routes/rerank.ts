// POST /v1/rerank and POST /v1/score, for `type: rerank` models: metered as embeddings are
// (authentication, plan gating, content policy, the context check per pair, limits and the
// hold, the model's targets with fallbacks and circuits, one debit), charged input_per_mtok on
// the upstream's usage.total_tokens (else its prompt_tokens, else the gateway's count: each
// pair's two texts). Scores come from the target provider's `rerank`; the wire formats are
// dialects/rerank.

import { admitAndHold, authenticateMetered, settleAfter } from '../pipeline/admit.js';
import { Attempts } from '../pipeline/attempts.js';
import { checkModelType } from '../pipeline/checks.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';
import type { ChatRequest } from '../schema/chat.js';
import { GatewayError } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { userOf } from '../auth/attribution.js';
import { sendJson } from '../http/respond.js';
import { parseRerank, parseScore, renderRerank, renderScore } from '../dialects/rerank/index.js';

export async function serveRerank(route: 'rerank' | 'score', x: Exchange): Promise<void> {
  const { state, ctx, req, res } = x;
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const body = await readJsonBody(req, state.config.server);
  const r = route === 'rerank' ? parseRerank(body) : parseScore(body);
  ctx.requestModel = r.model;
  const model = state.catalog.resolve(r.model, ctx.principal.plan, false, (m) => (state.healthy(m) ? null : 'unhealthy'), ctx.principal.key);
  ctx.model = model.id;
  checkModelType(model, 'rerank');
  // The internal request the shared pieces take: each distinct text as a user turn (content
  // policy), no output (the hold is the texts' cost only).
  const request: ChatRequest = {
    model: r.model, messages: r.texts.map((content) => ({ role: 'user', content })), stream: false, includeUsage: false,
    maxOutputTokens: 0, imageCount: 0, body: {}, user: userOf(body),
  };
  state.policy.check(request.messages);
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
  const admitted = await admitAndHold(x, model, request, prompt);
  if (admitted === undefined) return;
  const attempts = new Attempts(x, request, model, prompt, admitted.deadline);
  await settleAfter(admitted, ctx, () => attempts.using(async () => {
    for (;;) {
      const attempt = await attempts.next();
      const { target } = attempt;
      try {
        const rerank = target.provider.rerank;
        // Inside the attempt: its replica is begun already, and run() ends it.
        const result = await attempts.run(attempt, (call) => {
          if (rerank === undefined) throw new GatewayError('model_unavailable', `The model '${model.id}' cannot ${route} on this provider.`, { fault: false });
          return rerank.call(target.provider, call, r);
        });
        ctx.usageSource = result.totalTokens === undefined ? 'counted' : 'upstream';
        const tokens = result.totalTokens ?? prompt;
        ctx.usage = { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens };
        await admitted.charge.settle(ctx.usage);
        if (res.destroyed) return;
        ctx.ttftMs = performance.now() - ctx.start;
        const answer = route === 'rerank' ? await renderRerank(r, model.id, result.scores, tokens) : await renderScore(model.id, result.scores, tokens);
        if (res.destroyed) return;
        sendJson(res, 200, answer, answerHeaders(ctx, result.headers));
        return;
      } catch (err) {
        if (!attempts.canFallBack(err)) throw err;
      }
    }
  }));
}
