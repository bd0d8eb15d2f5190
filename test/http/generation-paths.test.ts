// Which paths passthrough refuses (lib/http/generation-paths.ts): a model server's generation
// endpoints under any spelling a server would still route, joined to the target's base path.

import t from 'tap';
import { GatewayError } from '../../lib/errors.js';
import { baseSegments, refuseGeneration } from '../../lib/http/generation-paths.js';

function refused(base: string, path: string, method = 'POST'): string | undefined {
  try {
    refuseGeneration(baseSegments(`http://model:8000${base}`), path, method);
    return undefined;
  } catch (err) {
    t.ok(err instanceof GatewayError);
    return (err as GatewayError).code;
  }
}

t.test('generation endpoints of vLLM, llama.cpp, Ollama, TGI, SGLang and KServe are refused', async (t) => {
  for (const p of ['/invocations', '/rerank', '/v2/rerank', '/score', '/pooling', '/classify', '/completion', '/completions',
    '/chat/completions', '/embedding', '/embeddings', '/infill', '/reranking', '/api/chat', '/api/generate', '/api/embed',
    '/api/embeddings', '/generate', '/generate_stream', '/encode', '/v2/models/m/infer', '/v1/chat/completions', '/v1',
    '/RERANK', '/Rerank/', '/rerank;jsessionid=1', '/x/..;/rerank', '/a/./rerank',
    // Found by our second attack: Vertex routes (TGI, SGLang), KoboldCpp, LocalAI, SGLang's health generate.
    '/vertex', '/vertex_generate', '/api/extra/generate/stream', '/images/generations', '/tts', '/health_generate', '/generate_from_file']) {
    t.equal(refused('', p), 'unknown_url', p);
  }
  t.equal(refused('', '/', 'POST'), 'unknown_url', 'POST / (TGI generates there)');
});

t.test('other paths pass; the base path counts as the proxy joins it', async (t) => {
  for (const p of ['/health', '/version', '/metrics', '/tokenize', '/detokenize', '/props', '/slots', '/api/tags', '/ping', '/load', '/v2/health/ready']) {
    t.equal(refused('', p), undefined, p);
  }
  t.equal(refused('', '/', 'GET'), undefined, 'GET / is a page');
  t.equal(refused('/v1', '/models', 'GET'), 'unknown_url', 'under a /v1 base everything is the metered API');
  t.equal(refused('/v1/', '/version', 'GET'), 'unknown_url');
  t.equal(refused('/ollama', '/api/chat'), 'unknown_url', 'a prefix keeps the last segment');
  t.equal(refused('/ollama', '/api/tags', 'GET'), undefined);
  t.equal(refused('/tgi', '/', 'POST'), 'unknown_url', 'POST to the root under a base path too');
  t.equal(refused('/tgi', '/', 'GET'), undefined);
});
