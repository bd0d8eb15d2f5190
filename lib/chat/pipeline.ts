// POST /v1/chat/completions, in order: authenticate, read and validate the body, resolve the
// model, check images, policy and context, then call the provider and answer as one JSON body
// or as an event stream. Each step throws a GatewayError; the router writes it.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { GatewayError } from '../errors.js';
import { isJsonContentType, readBody } from '../http/body.js';
import { parseJsonBody } from '../http/json.js';
import { sendJson, type RequestContext } from '../http/respond.js';
import type { Metrics } from '../observe/metrics.js';
import { TIMEOUT, type Provider, type ProviderCall } from '../providers/types.js';
import { DONE_FRAME, KEEPALIVE_FRAME, SSE_HEADERS, dataFrame, writeFrame } from '../sse/writer.js';
import { counter, estimatePromptTokens } from '../tokens/count.js';
import { IMAGE_TOKENS, checkContext, checkImages } from './checks.js';
import type { ChatCompletion, ChunkChoice, Usage } from './types.js';
import { validateChatRequest } from './validate.js';
import type { GatewayState } from '../state.js';
import { envelope } from '../errors.js';

const CLIENT_GONE = Symbol('tollgate.client-gone');

function completionId(): string {
  return `chatcmpl-${randomUUID().replace(/-/g, '')}`;
}

function countedUsage(call: ProviderCall, completionText: string): Usage {
  const count = counter(call.model.tokenizer);
  const prompt = estimatePromptTokens(call.request.messages, count, IMAGE_TOKENS);
  const completion = count(completionText);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

export async function handleChat(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, req: IncomingMessage, res: ServerResponse,
): Promise<void> {
  ctx.principal = state.keys.authenticate(req.headers.authorization);
  if (!isJsonContentType(req.headers['content-type'])) {
    throw new GatewayError('unsupported_media_type', 'The request body must be JSON (Content-Type: application/json).');
  }
  const body = parseJsonBody(await readBody(req, state.config.server.max_body_bytes));
  const request = validateChatRequest(body);
  ctx.stream = request.stream;
  const model = state.catalog.resolve(request.model, ctx.principal.plan, request.imageCount > 0);
  ctx.model = model.id;
  checkImages(request, model);
  state.policy.check(request.messages);
  checkContext(request, model);

  const provider = state.providers.get(model.provider)!;
  ctx.provider = provider.name;
  const ac = new AbortController();
  const call: ProviderCall = { request, model, upstreamModel: model.upstream_model ?? model.id, signal: ac.signal };
  const onClose = () => { if (!res.writableFinished) ac.abort(CLIENT_GONE); };
  res.on('close', onClose);
  const timer = setTimeout(() => ac.abort(TIMEOUT), provider.config.timeout_ms);
  const started = performance.now();
  try {
    if (request.stream) await streamAnswer(state, metrics, ctx, res, provider, call, started);
    else await completeAnswer(metrics, ctx, res, provider, call, started);
  } finally {
    clearTimeout(timer);
    res.off('close', onClose);
    ctx.upstreamMs = performance.now() - started;
    metrics.upstreamDuration.labels(provider.name).observe(ctx.upstreamMs / 1000);
  }
}

async function completeAnswer(
  metrics: Metrics, ctx: RequestContext, res: ServerResponse, provider: Provider, call: ProviderCall, started: number,
): Promise<void> {
  const result = await provider.complete(call);
  let usage = result.usage;
  ctx.usageSource = 'upstream';
  if (usage === undefined) {
    usage = countedUsage(call, result.choices.map((c) => c.message.content ?? '').join(''));
    ctx.usageSource = 'counted';
  }
  ctx.usage = usage;
  ctx.ttfcMs = performance.now() - started;
  const completion: ChatCompletion = {
    id: completionId(),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: call.model.id,
    choices: result.choices,
    usage,
  };
  if (res.destroyed) return;
  sendJson(res, 200, JSON.stringify(completion), { ...result.headers, 'x-request-id': ctx.id });
  metrics.timeToFirstChunk.labels(provider.name).observe(ctx.ttfcMs / 1000);
}

/**
 * A chunk "commits" the stream (sends the 200 and headers) only once it carries something:
 * text, tool calls, a refusal, or a finish reason that explains an empty answer. Until then
 * chunks are held, so an upstream that fails or answers nothing still gets a real status.
 */
function isSubstantive(choices: readonly ChunkChoice[]): boolean {
  for (const c of choices) {
    const d = c.delta;
    if ((d.content !== undefined && d.content !== null && d.content !== '') || d.tool_calls !== undefined ||
      (d.refusal !== undefined && d.refusal !== null && d.refusal !== '') ||
      (c.finish_reason !== null && c.finish_reason !== 'stop')) return true;
  }
  return false;
}

async function streamAnswer(
  state: GatewayState, metrics: Metrics, ctx: RequestContext, res: ServerResponse,
  provider: Provider, call: ProviderCall, started: number,
): Promise<void> {
  const includeUsage = call.request.includeUsage;
  const head = `{"id":"${completionId()}","object":"chat.completion.chunk","created":${Math.floor(Date.now() / 1000)},"model":${JSON.stringify(call.model.id)},"choices":`;
  const tail = includeUsage ? ',"usage":null}' : '}';
  const frame = (choices: readonly ChunkChoice[]) => dataFrame(head + JSON.stringify(choices) + tail);

  // Keep-alives run from the moment the upstream is called: an upstream that is slow to send
  // even its headers is silent too. The first one commits the stream (200 + headers).
  let committed = false;
  let upstreamHeaders: Record<string, string> = {};
  const commit = () => {
    committed = true;
    res.writeHead(200, { ...SSE_HEADERS, ...upstreamHeaders, 'x-request-id': ctx.id });
    metrics.openStreams.inc();
  };
  const keepalive = setTimeout(function tick() {
    if (res.destroyed) return;
    if (!committed) commit();
    res.write(KEEPALIVE_FRAME);
    keepalive.refresh();
  }, state.config.server.sse_keepalive_ms);

  const roleSent: boolean[] = [];
  const held: ChunkChoice[][] = [];
  let text = '';
  let usage: Usage | undefined;
  try {
    const upstream = await provider.stream(call);
    upstreamHeaders = upstream.headers;
    const iterator = upstream[Symbol.asyncIterator]();
    for (;;) {
      const step = await iterator.next();
      keepalive.refresh();
      if (step.done === true) break;
      const part = step.value;
      if (part.kind === 'usage') { usage = part.usage; continue; }
      for (const c of part.choices) {
        if (roleSent[c.index] !== true) {
          roleSent[c.index] = true;
          if (c.delta.role === undefined) c.delta = { role: 'assistant', ...c.delta };
        }
        if (typeof c.delta.content === 'string') text += c.delta.content;
      }
      if (!committed) {
        if (!isSubstantive(part.choices)) { held.push(part.choices); continue; }
        commit();
      }
      if (ctx.ttfcMs === undefined) {
        ctx.ttfcMs = performance.now() - started;
        metrics.timeToFirstChunk.labels(provider.name).observe(ctx.ttfcMs / 1000);
      }
      for (const h of held.splice(0)) res.write(frame(h));
      const ok = writeFrame(res, frame(part.choices), call.signal);
      if (ok !== true && !(await ok)) {
        // The client left, or stopped reading until the time ran out: nothing more can reach it.
        void iterator.return?.();
        if (!res.destroyed) res.destroy();
        return;
      }
    }
    if (!committed) throw new GatewayError('provider_error', 'The model provider sent an empty answer.');
    ctx.usageSource = usage === undefined ? 'counted' : 'upstream';
    ctx.usage = usage ?? countedUsage(call, text);
    if (includeUsage) {
      res.write(dataFrame(`${head}[],"usage":${JSON.stringify(ctx.usage)}}`));
    }
    res.end(DONE_FRAME);
  } catch (err) {
    if (!committed || res.destroyed) throw err;
    // After the first byte an error can only be told in the stream: one envelope event, and no
    // [DONE], so the client knows the answer is incomplete.
    const e = err instanceof GatewayError ? err : new GatewayError('internal_error', 'The gateway failed mid-stream.', { cause: err });
    ctx.code = e.code;
    ctx.usageSource = 'counted';
    ctx.usage = countedUsage(call, text);
    res.end(dataFrame(JSON.stringify(envelope(e, ctx.id))));
    if (!(err instanceof GatewayError)) throw err;
  } finally {
    clearTimeout(keepalive);
    if (committed) metrics.openStreams.dec();
  }
}
