// The /v1 route table: which paths exist, the methods each takes, the dialect whose error shape
// a path's answers take, and which handler serves it. Metered routes (generations, embeddings,
// rerank and score, audio, token counts) count toward requests_per_minute, and one refused for
// its content spends a request all the same (pipeline/admit.ts refusalSpends); model lists and
// stored responses do not. The self-service routes (GET /v1/key, /v1/usage: ./self.ts) are not
// metered but spend a request each, before they read anything.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { chatDialect } from '../dialects/chat/index.js';
import { completionsDialect } from '../dialects/completions/index.js';
import { messagesDialect } from '../dialects/messages/index.js';
import { responsesDialect } from '../dialects/responses/index.js';
import type { Dialect } from '../dialects/types.js';
import { GatewayError, MAX_ECHO, clip } from '../errors.js';
import type { Metrics } from '../observe/metrics.js';
import { refusalSpends } from '../pipeline/admit.js';
import type { Exchange, RequestContext } from '../pipeline/context.js';
import { handleGeneration } from '../pipeline/generate.js';
import type { GatewayState } from '../state.js';
import { serveAudio } from './audio.js';
import { serveCountTokens } from './count-tokens.js';
import { serveEmbeddings } from './embeddings.js';
import { serveModels } from './models.js';
import { serveRerank } from './rerank.js';
import { serveKey, serveUsage } from './self.js';
import { serveStoredResponse } from './stored-responses.js';
import { serveMcp } from '../mcp/serve.js';
import { serveBatches } from '../batch/batches.js';
import { serveFiles } from '../batch/files.js';

export type V1Route =
  | 'chat' | 'completions' | 'messages' | 'messages_count_tokens' | 'responses' | 'response' | 'embeddings' | 'rerank' | 'score'
  | 'audio_transcriptions' | 'audio_translations' | 'models' | 'model' | 'key' | 'usage' | 'mcp' | 'files' | 'file' | 'batches' | 'batch' | 'unknown';

export function v1Route(path: string): V1Route {
  if (path === '/mcp' || path.startsWith('/mcp/')) return 'mcp';
  if (path === '/v1/chat/completions') return 'chat';
  if (path === '/v1/completions') return 'completions';
  if (path === '/v1/messages') return 'messages';
  if (path === '/v1/messages/count_tokens') return 'messages_count_tokens';
  if (path === '/v1/responses') return 'responses';
  if (path === '/v1/embeddings') return 'embeddings';
  if (path === '/v1/rerank') return 'rerank';
  if (path === '/v1/score') return 'score';
  if (path === '/v1/audio/transcriptions') return 'audio_transcriptions';
  if (path === '/v1/audio/translations') return 'audio_translations';
  if (path.startsWith('/v1/responses/') && path.length > 14 && path.indexOf('/', 14) === -1) return 'response';
  if (path === '/v1/models') return 'models';
  if (path === '/v1/key') return 'key';
  if (path === '/v1/usage') return 'usage';
  if (path.startsWith('/v1/models/') && path.length > 11) return 'model';
  if (path === '/v1/files') return 'files';
  if (/^\/v1\/files\/[^/]+(\/content)?$/.test(path)) return 'file';
  if (path === '/v1/batches') return 'batches';
  if (/^\/v1\/batches\/[^/]+(\/cancel)?$/.test(path)) return 'batch';
  return 'unknown';
}

/** The dialect whose error shape a path's answers take (unknown paths under it included). */
export function dialectOf(path: string): Dialect | undefined {
  if (path === '/v1/messages' || path.startsWith('/v1/messages/')) return messagesDialect;
  return undefined;
}

export const ALLOW: Record<V1Route, string> = {
  chat: 'POST', completions: 'POST', messages: 'POST', messages_count_tokens: 'POST', responses: 'POST', response: 'GET, DELETE', embeddings: 'POST',
  rerank: 'POST', score: 'POST', audio_transcriptions: 'POST', audio_translations: 'POST',
  models: 'GET, HEAD', model: 'GET, HEAD', key: 'GET', usage: 'GET', mcp: 'POST, DELETE', files: 'GET, POST', file: 'GET, DELETE', batches: 'GET, POST',
  batch: 'GET, POST', unknown: '',
};

/** Refuses, before the config state is awaited, a path that does not exist or a method it does not take. */
export function checkV1(route: V1Route, req: IncomingMessage, path: string): void {
  if (route === 'unknown') throw new GatewayError('unknown_url', `Unknown path: ${clip(path)}`);
  if (!ALLOW[route].includes(req.method ?? '')) {
    throw new GatewayError('method_not_allowed', `Method ${clip(req.method ?? '', 16)} is not allowed on ${clip(path, MAX_ECHO - 16)}; use ${ALLOW[route]}.`, {
      headers: { allow: ALLOW[route] },
    });
  }
}

/** Serves a /v1 request on the state pinned for it. */
export async function serveV1(state: GatewayState, metrics: Metrics, ctx: RequestContext, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
  // MCP's endpoints (CONTRACT section 17) take the same way in: lib/mcp/.
  if (ctx.route === 'mcp') return serveMcp(state, metrics, ctx, req, res, path);
  if (ctx.route === 'files' || ctx.route === 'file') {
    await serveFiles(state, ctx, req, res, path.slice('/v1/files'.length));
    return;
  }
  if (ctx.route === 'batches' || ctx.route === 'batch') {
    await serveBatches(state, ctx, req, res, path.slice('/v1/batches'.length));
    return;
  }
  const x: Exchange = { state, metrics, ctx, req, res };
  if (ctx.route === 'models' || ctx.route === 'model' || ctx.route === 'response' || ctx.route === 'key' || ctx.route === 'usage') {
    await unmetered(x, path);
    return;
  }
  try {
    await metered(x);
  } catch (err) {
    throw await refusalSpends(x, err);
  }
}

/** The routes that count toward requests_per_minute (generations, embeddings, rerank, score, audio, token counts). */
async function metered(x: Exchange): Promise<void> {
  const { ctx } = x;
  const route = ctx.route;
  if (route === 'chat') {
    ctx.dialect = chatDialect;
    await handleGeneration(chatDialect, x);
  } else if (route === 'completions') {
    ctx.dialect = completionsDialect;
    await handleGeneration(completionsDialect, x);
  } else if (route === 'responses') {
    ctx.dialect = responsesDialect;
    await handleGeneration(responsesDialect, x);
  } else if (route === 'embeddings') await serveEmbeddings(x);
  else if (route === 'rerank' || route === 'score') await serveRerank(route, x);
  else if (route === 'audio_transcriptions') await serveAudio('transcriptions', x);
  else if (route === 'audio_translations') await serveAudio('translations', x);
  else if (route === 'messages') await handleGeneration(messagesDialect, x);
  else await serveCountTokens(x);
}

/** The routes that hold and charge nothing: model lists, stored responses, and the key's own view and usage. */
async function unmetered(x: Exchange, path: string): Promise<void> {
  const route = x.ctx.route;
  if (route === 'key') await serveKey(x);
  else if (route === 'usage') await serveUsage(x);
  else if (route === 'response') await serveStoredResponse(x, path.slice('/v1/responses/'.length));
  else await serveModels(x, path);
}
