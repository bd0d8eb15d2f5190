// POST /v1/embeddings: not a streaming generation, so not a Dialect, but metered by the same
// pieces as every generation: authentication, plan gating, content policy, the context check
// per input, limits and the hold (admitAndHold), the model's targets with fallbacks and
// circuits (Attempts), one debit of input_per_mtok x prompt tokens (settleAfter), and the usage
// record the router writes. Vectors come from the target provider's `embed`; the wire format is
// dialects/embeddings.

import { admitAndHold, authenticateMetered, settleAfter } from '../pipeline/admit.js';
import { Attempts } from '../pipeline/attempts.js';
import { checkModelType } from '../pipeline/checks.js';
import { answerHeaders, type Exchange } from '../pipeline/context.js';
import type { ChatRequest } from '../schema/chat.js';
import { GatewayError } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { userOf } from '../auth/attribution.js';
import { sendJson } from '../http/respond.js';
import { base64, parseEmbeddings } from '../dialects/embeddings/index.js';
import { joinSliced } from '../slice.js';

export async function serveEmbeddings(x: Exchange): Promise<void> {
  const { state, ctx, req, res } = x;
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const raw = await readJsonBody(req, state.config.server);
  const e = parseEmbeddings(raw);
  ctx.requestModel = e.model;
  const model = state.catalog.resolve(e.model, ctx.principal.plan, false, (m) => (state.healthy(m) ? null : 'unhealthy'), ctx.principal.key);
  ctx.model = model.id;
  checkModelType(model, 'embedding');
  const texts = e.input.filter((x): x is string => typeof x === 'string');
  // The internal request the shared pieces take: the texts as one user turn (content policy),
  // no output (the hold is the prompt's cost only).
  const request: ChatRequest = {
    model: e.model, messages: texts.map((content) => ({ role: 'user', content })), stream: false, includeUsage: false,
    maxOutputTokens: 0, imageCount: 0, body: {}, user: userOf(raw),
  };
  state.policy.check(request.messages);
  // Each text counted no further than the model could take (an input past that is refused all
  // the same), as one job that gives the event loop back (CONTRACT section 21).
  const counted = await state.textsTokens(texts, model, model.context_window);
  let prompt = 0;
  for (let i = 0, t = 0; i < e.input.length; i++) {
    const x = e.input[i]!;
    const n = typeof x === 'string' ? counted[t++]! : x.length;
    if (n > model.context_window) {
      throw new GatewayError('context_length_exceeded',
        `Input ${i} has at least ${n} tokens; the model '${model.id}' takes at most ${model.context_window}.`, { param: 'input' });
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
        const embed = target.provider.embed;
        // Inside the attempt: its replica is begun already, and run() ends it.
        const result = await attempts.run(attempt, (call) => {
          if (embed === undefined) throw new GatewayError('model_unavailable', `The model '${model.id}' cannot embed on this provider.`, { fault: false });
          return embed.call(target.provider, call, e);
        });
        ctx.usageSource = result.promptTokens === undefined ? 'counted' : 'upstream';
        const tokens = result.promptTokens ?? prompt;
        ctx.usage = { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens };
        await admitted.charge.settle(ctx.usage);
        if (res.destroyed) return;
        ctx.ttftMs = performance.now() - ctx.start;
        // Rendered in slices: 2048 vectors of thousands of numbers are tens of MB of JSON.
        const data = await joinSliced(result.vectors, (v, index) => JSON.stringify({ object: 'embedding', index, embedding: e.base64 ? base64(v) : v }));
        if (res.destroyed) return;
        const usage = JSON.stringify({ prompt_tokens: tokens, total_tokens: tokens });
        sendJson(res, 200, `{"object":"list","data":[${data}],"model":${JSON.stringify(model.id)},"usage":${usage}}`, answerHeaders(ctx, result.headers));
        return;
      } catch (err) {
        if (!attempts.canFallBack(err)) throw err;
      }
    }
  }));
}
