// responses.max_bytes and its siblings as an operator sets them: a YAML file, `tollgate check`,
// `tollgate serve`, and the official openai SDK (client.responses.create / retrieve) over HTTP.

import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { DEMO_KEY } from '../helpers/gateway.js';
import { BIN, serveChild } from '../helpers/child.js';

const yaml = (responses: string) => `server:
  port: 0
  host: 127.0.0.1
accounts:
  - id: demo
    plan: free
    wallet_units: 1000000
    keys: [${DEMO_KEY}]
providers:
  echo: { kind: echo }
models:
  - { id: echo-small, provider: echo, context_window: 8192, max_output_tokens: 2048 }
responses:
${responses}
`;

t.test('tollgate check: the keys are known, and their values checked', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-responses-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const good = join(dir, 'good.yaml');
  await writeFile(good, yaml('  max_bytes: 4096\n  max_account_bytes: 65536\n  max_chain_length: 50'));
  const ok = spawnSync(process.execPath, [BIN, 'check', '--config', good], { encoding: 'utf8' });
  t.equal(ok.status, 0, ok.stdout + ok.stderr);
  const bad = join(dir, 'bad.yaml');
  await writeFile(bad, yaml('  max_bytes: 0\n  max_account_bytes: lots\n  max_chain_length: 2.5'));
  const no = spawnSync(process.execPath, [BIN, 'check', '--config', bad], { encoding: 'utf8' });
  t.equal(no.status, 1);
  const out = no.stdout + no.stderr;
  t.match(out, /responses\.max_bytes: must be a positive integer/);
  t.match(out, /responses\.max_account_bytes: must be a positive integer/);
  t.match(out, /responses\.max_chain_length: must be a positive integer/);
});

t.test('tollgate serve with responses.max_bytes: a response above it is answered with store false, not kept', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-responses-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, yaml('  max_bytes: 4096'));
  const child = await serveChild(t, file);
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${child.url}/v1`, maxRetries: 0 });

  // The echo model answers the input back: the stored part is about twice the input, plus the object.
  const small = await client.responses.create({ model: 'echo-small', input: 'remember me' });
  t.equal((small as any).store, true, 'a small response is kept');
  t.equal((await client.responses.retrieve(small.id)).output_text, small.output_text);

  const big = await client.responses.create({ model: 'echo-small', input: `${'word '.repeat(600)}end`, previous_response_id: small.id });
  t.equal(big.status, 'completed', 'the large one is answered');
  t.ok(big.output_text.endsWith('end'));
  t.equal((big as any).store, false, 'with store: false');
  const missing = await client.responses.retrieve(big.id).catch((e) => e);
  t.ok(missing instanceof OpenAI.NotFoundError, 'and is not kept');
  t.equal(missing.code, 'response_not_found');
  const cont = await client.responses.create({ model: 'echo-small', input: 'and now?', previous_response_id: big.id }).catch((e) => e);
  t.equal(cont.status, 404, 'nor can it be continued');

  // The conversation before it is intact and goes on.
  const next = await client.responses.create({ model: 'echo-small', input: 'still here?', previous_response_id: small.id });
  t.equal((next as any).store, true);
  t.equal(next.previous_response_id, small.id);
  t.ok(next.usage!.input_tokens > small.usage!.input_tokens, 'it carries the earlier turns');
});
