// POST /v1/embeddings: not a streaming generation, so not a Dialect, but metered by the same
// pieces as every generation (pipeline/unary.ts: plan gating, content policy, limits and the
// hold, the model's targets with fallbacks and circuits, one debit of input_per_mtok x prompt
// tokens), with the context check per input here, and the usage record the router writes.
// Vectors come from the target provider's `embed`; the wire format is dialects/embeddings.

import { authenticateMetered } from '../pipeline/admit.js';
import type { Exchange } from '../pipeline/context.js';
import { unaryCall, unaryModel, unaryRequest } from '../pipeline/unary.js';
import { GatewayError } from '../errors.js';
import { readJsonBody } from '../http/json.js';
import { userOf } from '../auth/attribution.js';
import { base64, parseEmbeddings } from '../dialects/embeddings/index.js';
import { joinSlicedBytes } from '../slice.js';

export async function serveEmbeddings(x: Exchange): Promise<void> {
  const { state, ctx, req } = x;
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const raw = await readJsonBody(req, state.config.server);
  const e = parseEmbeddings(raw);
  const model = unaryModel(x, e.model, 'embedding');
  const texts = e.input.filter((t): t is string => typeof t === 'string');
  const request = unaryRequest(x, e.model, texts, userOf(raw));
  // Each text counted no further than the model could take (an input past that is refused all
  // the same), as one job that gives the event loop back (CONTRACT section 21).
  const counted = await state.textsTokens(texts, model, model.context_window);
  let prompt = 0;
  for (let i = 0, t = 0; i < e.input.length; i++) {
    const input = e.input[i]!;
    const n = typeof input === 'string' ? counted[t++]! : input.length;
    if (n > model.context_window) {
      throw new GatewayError('context_length_exceeded',
        `Input ${i} has at least ${n} tokens; the model '${model.id}' takes at most ${model.context_window}.`, { param: 'input' });
    }
    prompt += n;
  }
  await unaryCall(x, model, {
    request, prompt, verb: 'embed',
    serve: (provider, call) => provider.embed?.(call, e),
    tokens: (result) => result.promptTokens,
    // Rendered in slices: 2048 vectors of thousands of numbers are tens of MB of JSON.
    answer: async (result, tokens) => {
      const usage = JSON.stringify({ prompt_tokens: tokens, total_tokens: tokens });
      const body = await joinSlicedBytes('{"object":"list","data":[', result.vectors,
        (v, index) => JSON.stringify({ object: 'embedding', index, embedding: e.base64 ? base64(v) : v }),
        `],"model":${JSON.stringify(model.id)},"usage":${usage}}`);
      return { body, type: 'application/json', headers: result.headers };
    },
  });
}
