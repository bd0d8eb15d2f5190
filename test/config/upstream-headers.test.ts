// Headers a config sends upstream (providers.NAME.headers and api_key, observe.otlp_headers)
// are refused by `check` when the HTTP client could not send them. Found through the operator's
// path: `headers: {"bad name": x}`, an api_key with a new line (a secret pasted with its line
// end), a header value with a NUL or a character beyond Latin-1, or content-length passed
// `check` and `serve`, and then every request to that provider failed 502 provider_error
// (undici refuses the header), with no log line saying why.

import t from 'tap';
import fc from 'fast-check';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import YAML from 'yaml';
import { ConfigError, validateConfig } from '../../lib/config/load.js';
import { BIN } from '../helpers/child.js';

function problems(config: unknown): string[] {
  try {
    validateConfig(config);
    return [];
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
}

const provider = (extra: Record<string, unknown>) => ({
  providers: { up: { kind: 'openai', base_url: 'http://127.0.0.1:9/v1', ...extra } },
  models: [{ id: 'm', provider: 'up' }],
});
const BAD = 'must not hold control characters (a new line, say) or characters beyond Latin-1: it is sent as an HTTP header';

t.test('each header the HTTP client would refuse is a problem naming it', async (t) => {
  t.strictSame(problems(provider({
    api_key: 'sk-abc\n',
    headers: { 'bad name': 'x', 'x-nul': 'v\u0000', 'x-euro': '\u20ac', 'Content-Length': '5', connection: 'close', 'x-fine': 'ok\tok é' },
  })), [
    'providers.up.headers."bad name": not a valid header name',
    `providers.up.headers.x-nul: ${BAD}`,
    `providers.up.headers.x-euro: ${BAD}`,
    'providers.up.headers.Content-Length: set by the HTTP client itself; it cannot be configured',
    'providers.up.headers.connection: set by the HTTP client itself; it cannot be configured',
    `providers.up.api_key: ${BAD}`,
  ]);
  t.strictSame(problems({ observe: { otlp_endpoint: 'http://127.0.0.1:9', otlp_headers: { 'a:b': 'c', auth: 'x\r\ny' } } }), [
    'observe.otlp_headers.a:b: not a valid header name',
    `observe.otlp_headers.auth: ${BAD}`,
  ]);
  t.strictSame(problems(provider({ api_key: 'sk-ok', headers: { 'x-team': 'core', host: 'upstream.internal' } })), [], 'ordinary ones pass');
  // undici takes a Host value apart (an opening '[' with no ']' failed every request: a seed of
  // the property below found it).
  t.strictSame(problems(provider({ headers: { host: '[' } })),
    ['providers.up.headers.host: must be a host name or address, with an optional :port (an IPv6 address in brackets)']);
  t.strictSame(problems(provider({ headers: { Host: 'a b' } })).length, 1, 'a space is no host');
  for (const host of ['upstream.internal:8443', '[::1]:80', '10.0.0.7']) t.strictSame(problems(provider({ headers: { host } })), [], `${host} passes`);
});

t.test('check on a YAML file says so, exit 1', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-headers-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  await writeFile(file, 'providers:\n  up: {kind: openai, base_url: "http://127.0.0.1:9/v1", api_key: "sk-abc\\n"}\nmodels: [{id: m, provider: up}]\n');
  const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    execFile(process.execPath, [BIN, 'check', '--config', file], (err, _out, stderr) => resolve({ code: err === null ? 0 : (err as any).code, stderr }));
  });
  t.equal(code, 1);
  t.equal(stderr, `providers.up.api_key: ${BAD}\n`);
});

t.test('a header the config accepts is one the HTTP client sends (property)', async (t) => {
  // A server that answers every request at once: only what undici refuses fails.
  const server = createServer((socket) => {
    socket.on('error', () => undefined);
    socket.on('data', () => socket.end('HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => { server.close(); });
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  const sends = (headers: Record<string, string>) => request(url, { method: 'POST', headers, body: '{}' }).then(
    async (r) => { await r.body.dump(); return true; }, () => false);
  const name = fc.oneof(fc.stringMatching(/^[A-Za-z-]{1,12}$/), fc.string({ maxLength: 12 }), fc.string({ unit: 'binary', maxLength: 12 }),
    fc.constantFrom('content-length', 'Expect', 'Transfer-Encoding', 'Connection', 'host'));
  const value = fc.oneof(fc.string({ maxLength: 12 }), fc.string({ unit: 'binary', maxLength: 12 }), fc.string({ unit: 'binary-ascii', maxLength: 12 }));
  let accepted = 0;
  await fc.assert(fc.asyncProperty(name, value, async (name, value) => {
    const config = provider({ headers: { [name]: value }, api_key: value });
    // YAML carries any string: what a file can say, an object can.
    assert.deepEqual(YAML.parse(YAML.stringify(config)), config);
    if (problems(config).length > 0) return;
    accepted++;
    assert.ok(await sends({ [name]: value, authorization: `Bearer ${value}`, 'x-api-key': value }), `undici sends ${JSON.stringify({ [name]: value })}`);
  }), { numRuns: 300, seed: 20261123 }); // seeded like every property here: CI replays the same cases
  t.ok(accepted > 40, `${accepted} of 300 accepted, each one sent`);
});
