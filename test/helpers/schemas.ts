// OpenAI's published schemas (copied from shared/openai-schemas; CreateCompletionResponse written
// from OpenAI's OpenAPI description, see its x-tollgate-source) as ajv validators.

import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
const dir = new URL('../fixtures/openai-schemas/', import.meta.url);

function load(name: string) {
  const schema = JSON.parse(readFileSync(new URL(`${name}.json`, dir), 'utf8'));
  const validate = ajv.compile(schema);
  return (value: unknown): string[] => (validate(value) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`));
}

export const schemas = {
  completion: load('CreateChatCompletionResponse'),
  chunk: load('CreateChatCompletionStreamResponse'),
  model: load('Model'),
  list: load('ListModelsResponse'),
  error: load('TollgateErrorEnvelope'),
  openaiError: load('ErrorResponse'),
  response: load('Response'),
  responseEvent: load('ResponseStreamEvent'),
  embeddings: load('CreateEmbeddingResponse'),
  /** Hand-written from OpenAI's OpenAPI description (the shared schemas have none): answers and chunks. */
  textCompletion: load('CreateCompletionResponse'),
};
