// What passthrough never serves (CONTRACT §21, one path, one decision): a path that, joined to
// the passthrough target's own base path as the proxy joins it, reaches a model server's
// generation endpoint. Those are metered routes under another name: vLLM's /invocations,
// /rerank, /v2/rerank, /score, /pooling, /classify; llama.cpp's /completion, /embedding,
// /infill, /reranking; Ollama's /api/chat, /api/generate, /api/embed; TGI's /generate and its
// POST /; SGLang's /generate, /encode; KServe v2's /v2/models/{m}/infer; and all of /v1 (a
// target such as http://host/v1 turns /chat/completions into /v1/chat/completions).
// Any segment counts, not only the last (KoboldCpp's /api/extra/generate/stream). This is a list
// of the names model servers use; a server with a generation route of another name needs
// passthrough_auth (check warns when passthrough points at a provider's host).
// Judged on the path http/path.ts already normalised (dot segments resolved, unreserved
// characters decoded), lower-cased, with ';' parameters cut off each segment, so neither a
// case-insensitive server nor one that reads matrix parameters is offered a way round.

import { GatewayError, clip } from '../errors.js';

/** The last segments that name a generation endpoint, on any model server Tollgate fronts. */
const GENERATION = new Set([
  'completion', 'completions', 'chat', 'embedding', 'embeddings', 'embed', 'infill', 'rerank', 'reranking',
  'score', 'pooling', 'classify', 'invocations', 'generate', 'generate_stream', 'encode', 'infer', 'predict',
  'responses', 'messages', 'transcriptions', 'translations', 'speech', 'realtime',
  // TGI's and SGLang's Vertex AI routes, SGLang's one-token health check and file batch,
  // LocalAI's unprefixed image and speech routes.
  'vertex', 'vertex_generate', 'health_generate', 'generate_from_file', 'generations', 'tts',
]);

/** The target's base path as segments ('/' and '' give none). */
export function baseSegments(target: string): string[] {
  return segments(new URL(target).pathname);
}

/**
 * Throws 404 unknown_url when the path, sent on under the target's base path, would reach a
 * generation endpoint of the model server; returns quietly otherwise.
 */
export function refuseGeneration(base: readonly string[], path: string, method: string | undefined): void {
  const own = segments(path);
  const all = base.length === 0 ? own : [...base, ...own];
  const named = all.find((seg) => GENERATION.has(seg));
  const why = all[0] === 'v1' ? 'it reaches the model server\'s /v1'
    : named !== undefined ? `${named} names a generation endpoint of the model server`
      : own.length === 0 && method === 'POST' ? 'POST to the server\'s root generates on some model servers (TGI)'
        : undefined;
  if (why === undefined) return;
  throw new GatewayError('unknown_url',
    `The path ${JSON.stringify(clip(path, 200))} is not passed through to the model server: ${why}, and passthrough is unmetered. ` +
    'Use the gateway\'s metered routes under /v1 (for example /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/rerank, /v1/score).');
}

function segments(path: string): string[] {
  const out: string[] = [];
  for (const raw of path.split('/')) {
    if (raw === '') continue;
    const semi = raw.indexOf(';');
    const seg = (semi === -1 ? raw : raw.slice(0, semi)).toLowerCase();
    if (seg === '..') out.pop();
    else if (seg !== '' && seg !== '.') out.push(seg);
  }
  return out;
}
