// The embeddings wire format (POST /v1/embeddings): the request's parser (each problem a 400
// naming its param) and a vector as OpenAI's base64. The route that meters it is
// routes/embeddings.ts.

import { GatewayError } from '../../errors.js';
import { badValue, wrongType } from '../../hub/params.js';
import type { EmbedInput } from '../../hub/forms.js';

const MAX_INPUTS = 2048;
const MAX_DIMENSIONS = 8192;
const MAX_FLOATS = 2048 * 3072;

export interface EmbeddingsRequest extends EmbedInput {
  model: string;
  base64: boolean;
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
export function base64(v: number[]): string {
  const f = new Float32Array(v);
  return Buffer.from(f.buffer, f.byteOffset, f.byteLength).toString('base64');
}
