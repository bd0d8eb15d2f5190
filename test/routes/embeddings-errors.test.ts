// Every section 7 error that POST /v1/embeddings can meet (it takes no images and does not
// stream), through an OpenAI-compatible upstream, in the envelope of CONTRACT section 4 with the
// real status, its headers, and nothing consumed.

import t from 'tap';
import { envelopeFields, runErrorTable, type DialectSpec } from '../helpers/error-table.js';

const spec: DialectSpec = {
  name: 'embeddings',
  path: '/v1/embeddings',
  streams: false,
  images: false,
  models: { main: 'e', paid: 'epaid', tiny: 'etiny' },
  headers: (credential) => ({ authorization: `Bearer ${credential}`, 'content-type': 'application/json' }),
  body: ({ model, text }) => ({ model, input: text }),
  invalid: () => [
    ['missing_required_parameter', 'input', { model: 'e' }],
    ['invalid_type', 'input', { model: 'e', input: 5 }],
    ['invalid_value', 'dimensions', { model: 'e', input: 'Hi', dimensions: 0 }],
    ['unsupported_value', 'encoding_format', { model: 'e', input: 'Hi', encoding_format: 'hex' }],
    ['unsupported_value', 'model', { model: 'm', input: 'Hi' }],
  ],
  errorFields: envelopeFields,
};

runErrorTable(t, spec, ['openai']);
