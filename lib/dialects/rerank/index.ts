// The rerank and score wire formats (vLLM's POST /v1/rerank, the Jina and Cohere shape, and
// POST /v1/score): the requests' parsers (each problem a 400 naming its param) and the answers'
// renderers. The route that meters them is routes/rerank.ts.

import { randomUUID } from 'node:crypto';
import { joinSlicedBytes } from '../../slice.js';
import { badValue, missing, wrongType } from '../../hub/params.js';
import type { RerankInput, RerankResult } from '../../hub/forms.js';

/** The most pairs one request scores (documents, or text_1 x text_2 pairs), as embeddings' inputs. */
export const MAX_PAIRS = 2048;

export interface RerankRequest extends RerankInput {
  model: string;
  /** Rerank: whether each result carries its document (default true, as vLLM's and Jina's). */
  returnDocuments: boolean;
  /**
   * Every text of the request (content policy and counting), a repeated one as often as it
   * comes: equal texts are found while they are counted, in slices (hashing 20 MB of them at
   * once held the event loop).
   */
  texts: string[];
}

function object(body: unknown): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) throw wrongType('body', 'a JSON object');
  const b = body as Record<string, unknown>;
  if (b.model === undefined) throw missing('model');
  if (typeof b.model !== 'string') throw wrongType('model', 'a string');
  return b;
}

function text(v: unknown, param: string): string {
  if (v === undefined || v === null) throw missing(param);
  if (typeof v !== 'string') throw wrongType(param, 'a string');
  if (v === '') throw badValue(param, 'must not be empty');
  return v;
}

/** A string or a non-empty list of non-empty strings, as a list. */
function texts(v: unknown, param: string): string[] {
  if (v === undefined || v === null) throw missing(param);
  if (typeof v === 'string') return [text(v, param)];
  if (!Array.isArray(v)) throw wrongType(param, 'a string or an array of strings');
  if (v.length === 0) throw badValue(param, 'must not be empty');
  if (v.length > MAX_PAIRS) throw badValue(param, `at most ${MAX_PAIRS} texts`);
  return v.map((x, i) => text(x, `${param}[${i}]`));
}

/** POST /v1/rerank: `model`, `query`, `documents` (strings), `top_n`, `return_documents`. */
export function parseRerank(body: unknown): RerankRequest {
  const b = object(body);
  const query = text(b.query, 'query');
  if (b.documents === undefined || b.documents === null) throw missing('documents');
  if (!Array.isArray(b.documents)) throw wrongType('documents', 'an array of strings');
  const documents = texts(b.documents, 'documents');
  let topN: number | undefined;
  if (b.top_n !== undefined && b.top_n !== null) {
    if (typeof b.top_n !== 'number') throw wrongType('top_n', 'an integer');
    // vLLM takes 0 for "all"; a positive count keeps the best that many.
    if (!Number.isSafeInteger(b.top_n) || b.top_n < 0) throw badValue('top_n', 'must be a non-negative integer');
    topN = b.top_n === 0 ? undefined : b.top_n;
  }
  const rd = b.return_documents ?? true;
  if (typeof rd !== 'boolean') throw wrongType('return_documents', 'a boolean');
  return {
    route: 'rerank', model: b.model as string, body: b, pairs: documents.map((d) => [query, d] as const), topN,
    returnDocuments: rd, texts: [query, ...documents],
  };
}

/**
 * POST /v1/score: `model`, `text_1`, `text_2`, each a string or a list. Pairs as vLLM makes
 * them: one text_1 against every text_2, or two lists of one length pairwise.
 */
export function parseScore(body: unknown): RerankRequest {
  const b = object(body);
  const first = texts(b.text_1, 'text_1');
  const second = texts(b.text_2, 'text_2');
  if (first.length !== 1 && first.length !== second.length) {
    throw badValue('text_2', `must have as many texts as text_1 (${first.length}), or text_1 just one`);
  }
  const pairs = second.map((t2, i) => [first.length === 1 ? first[0]! : first[i]!, t2] as const);
  return { route: 'score', model: b.model as string, body: b, pairs, topN: undefined, returnDocuments: false, texts: first.length === 1 ? [first[0]!, ...second] : [...first, ...second] };
}

/**
 * The answer to a rerank: results by falling score (ties by index), the best top_n; rendered in
 * slices (2048 documents echoed back are 20 MB of JSON).
 */
export async function renderRerank(r: RerankRequest, slug: string, scores: RerankResult['scores'], tokens: number): Promise<Buffer> {
  const ranked = [...scores].sort((a, b) => b.score - a.score || a.index - b.index).slice(0, r.topN ?? scores.length);
  const id = `rerank-${randomUUID().replaceAll('-', '')}`;
  return joinSlicedBytes(`{"id":${JSON.stringify(id)},"model":${JSON.stringify(slug)},"results":[`, ranked,
    ({ index, score }) => JSON.stringify(r.returnDocuments
      ? { index, relevance_score: score, document: { text: r.pairs[index]![1] } }
      : { index, relevance_score: score }),
    `],"usage":${JSON.stringify({ total_tokens: tokens })}}`);
}

/** The answer to a score: one score per pair, in pair order. */
export async function renderScore(slug: string, scores: RerankResult['scores'], tokens: number): Promise<Buffer> {
  const sorted = [...scores].sort((a, b) => a.index - b.index);
  const head = JSON.stringify({ id: `score-${randomUUID().replaceAll('-', '')}`, object: 'list', created: Math.floor(Date.now() / 1000), model: slug });
  const usage = JSON.stringify({ prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0 });
  return joinSlicedBytes(`${head.slice(0, -1)},"data":[`, sorted, ({ index, score }) => JSON.stringify({ index, object: 'score', score }), `],"usage":${usage}}`);
}
