// POST /v1/embeddings: not a streaming generation, so not a Dialect, but metered by the same
// pieces as every generation: authentication, plan gating, content policy, the context check
// per input, limits and the hold (admitAndHold), the model's targets with fallbacks and
// circuits (Attempts), one debit of input_per_mtok x prompt tokens (settleAfter), and the usage
// record the router writes. Vectors come from the target provider's `embed`.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { admitAndHold, Attempts, authenticateMetered, checkModelType, settleAfter } from '../../chat/pipeline.js';
import type { ChatRequest } from '../../chat/types.js';
import { GatewayError } from '../../errors.js';
import { readJsonBody } from '../../http/json.js';
import { answerHeaders, sendJson, type RequestContext } from '../../http/respond.js';
import type { Metrics } from '../../observe/metrics.js';
import type { EmbedInput } from '../../providers/types.js';
import type { GatewayState } from '../../state.js';

const MAX_INPUTS = 2048;
const MAX_DIMENSIONS = 8192;
const MAX_FLOATS = 2048 * 3072;

interface EmbeddingsRequest extends EmbedInput {
  model: string;
  base64: boolean;
}

function wrongType(param: string, expected: string): GatewayError {
  return new GatewayError('invalid_type', `Invalid type for '${param}': expected ${expected}.`, { param });
}
function badValue(param: string, why: string): GatewayError {
  return new GatewayError('invalid_value', `Invalid value for '${param}': ${why}.`, { param });
}

const isToken = (x: unknown) => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;

function inputs(v: unknown): (string | number[])[] {
  if (v === undefined || v === null) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'input'.", { param: 'input' });
  if (typeof v === 'string') return [v];
  if (!Array.isArray(v)) throw wrongType('input', 'a string, an array of strings, or token arrays');
  if (v.length === 0) throw badValue('input', 'must not be empty');
  if (v.length > MAX_INPUTS) throw badValue('input', `at most ${MAX_INPUTS} inputs`);
  if (v.every(isToken)) return [v as number[]]; // one token array
  return v.map((x, i) => {
    if (typeof x === 'string') return x;
    if (Array.isArray(x) && x.length > 0 && x.every(isToken)) return x as number[];
    throw wrongType(`input[${i}]`, 'a string or a non-empty array of token ids');
  });
}

export function parseEmbeddings(body: unknown): EmbeddingsRequest {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw wrongType('body', 'a JSON object');
  const b = body as Record<string, unknown>;
  if (b.model === undefined) throw new GatewayError('missing_required_parameter', "Missing required parameter: 'model'.", { param: 'model' });
  if (typeof b.model !== 'string') throw wrongType('model', 'a string');
  const input = inputs(b.input);
  for (let i = 0; i < input.length; i++) if (input[i] === '') throw badValue(input.length === 1 ? 'input' : `input[${i}]`, 'must not be empty');
  const format = b.encoding_format ?? 'float';
  if (format !== 'float' && format !== 'base64') {
    throw new GatewayError('unsupported_value', `Unsupported value for 'encoding_format': ${JSON.stringify(format)}. Supported values are: 'float', 'base64'.`, { param: 'encoding_format' });
  }
  let dimensions: number | undefined;
  if (b.dimensions !== undefined && b.dimensions !== null) {
    if (typeof b.dimensions !== 'number') throw wrongType('dimensions', 'an integer');
    if (!Number.isInteger(b.dimensions) || b.dimensions < 1 || b.dimensions > MAX_DIMENSIONS) {
      throw badValue('dimensions', `must be an integer from 1 to ${MAX_DIMENSIONS}`);
    }
    // The answer's size is inputs x dimensions, and the gateway builds it in memory.
    if (b.dimensions * input.length > MAX_FLOATS) throw badValue('dimensions', `at most ${MAX_FLOATS} numbers in all (inputs x dimensions)`);
    dimensions = b.dimensions;
  }
  if (b.user !== undefined && b.user !== null && typeof b.user !== 'string') throw wrongType('user', 'a string');
  return { model: b.model, input, dimensions, user: (b.user ?? undefined) as string | undefined, base64: format === 'base64' };
}

/** A vector as OpenAI's base64: little-endian float32 bytes. */
function base64(v: number[]): string {
  const f = new Float32Array(v);
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString('base64');
}

export async function handleEmbeddings(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, req: IncomingMessage, res: ServerResponse,
): Promise<void> {
  ctx.principal = await authenticateMetered(state, req.headers.authorization, req);
  const e = parseEmbeddings(await readJsonBody(req, state.config.server));
  ctx.requestModel = e.model;
  const model = state.catalog.resolve(e.model, ctx.principal.plan, false, (m) => (state.healthy(m) ? null : 'unhealthy'), ctx.principal.key);
  ctx.model = model.id;
  checkModelType(model, 'embedding');
  const texts = e.input.filter((x): x is string => typeof x === 'string');
  // The internal request the shared pieces take: the texts as one user turn (content policy),
  // no output (the hold is the prompt's cost only).
  const request: ChatRequest = {
    model: e.model, messages: texts.map((content) => ({ role: 'user', content })), stream: false, includeUsage: false,
    maxOutputTokens: 0, imageCount: 0, body: {},
  };
  state.policy.check(request.messages);
  let prompt = 0;
  for (let i = 0; i < e.input.length; i++) {
    const x = e.input[i]!;
    // Counted no further than the model could take: an input past that is refused all the same.
    const n = typeof x === 'string' ? await state.textTokens(x, model, model.context_window) : x.length;
    if (n > model.context_window) {
      throw new GatewayError('context_length_exceeded',
        `Input ${i} has at least ${n} tokens; the model '${model.id}' takes at most ${model.context_window}.`, { param: 'input' });
    }
    prompt += n;
  }
  const admitted = await admitAndHold(state, ctx, res, model, request, prompt);
  if (admitted === undefined) return;
  const session = req.headers['x-session-affinity'];
  const attempts = new Attempts(state, metrics, ctx, res, request, model, prompt, typeof session === 'string' ? session : undefined, admitted.deadline);
  await settleAfter(admitted, ctx, () => attempts.using(async () => {
    for (;;) {
      const attempt = attempts.next();
      const { target } = attempt;
      try {
        const embed = target.provider.embed;
        if (embed === undefined) throw new GatewayError('model_unavailable', `The model '${model.id}' cannot embed on this provider.`);
        const result = await attempts.run(attempt, (call) => embed.call(target.provider, call, e));
        ctx.usageSource = result.promptTokens === undefined ? 'counted' : 'upstream';
        const tokens = result.promptTokens ?? prompt;
        ctx.usage = { prompt_tokens: tokens, completion_tokens: 0, total_tokens: tokens };
        await admitted.charge.settle(ctx.usage);
        if (res.destroyed) return;
        ctx.ttftMs = performance.now() - ctx.start;
        const data = result.vectors.map((v, index) => ({ object: 'embedding', index, embedding: e.base64 ? base64(v) : v }));
        sendJson(res, 200, JSON.stringify({
          object: 'list', data, model: model.id, usage: { prompt_tokens: tokens, total_tokens: tokens },
        }), answerHeaders(ctx, result.headers));
        return;
      } catch (err) {
        if (!attempts.canFallBack(err)) throw err;
      }
    }
  }));
}
