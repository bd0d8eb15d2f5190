// The console's security headers on answers of every status (CONTRACT sections 12 and 21; issue
// #40 finding 10): Content-Security-Policy without unsafe-inline or unsafe-eval for scripts,
// X-Frame-Options DENY, nosniff and no-referrer on pages and API answers, redirects, 304, and
// every error the gateway writes for the console: 400, 401, 403, 404, 405, 413, 415, 429, 500
// and 503. Raw HTTP (node:http, nothing normalised) against `tollgate serve --config FILE` with
// a Redis store (stopped for the 503) and, for the 500, a copy of the package whose console
// bundle cannot be read; a console path the path normaliser refuses before routing (raw
// /console/%2e%2e/x). On the old code only pages and redirects carried them.

import t from 'tap';
import { spawn } from 'node:child_process';
import { cp, copyFile, mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { request, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import YAML from 'yaml';
import { serveChild } from '../helpers/child.js';
import { startRedis } from '../helpers/redis.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TOKEN = 'headers-admin-token-0123456789';
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const dir = await mkdtemp(join(tmpdir(), 'tollgate-console-headers-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

interface Answer { status: number; headers: IncomingHttpHeaders; body: string }

/** One request as bytes on a socket would make it: no header added, none normalised. */
function raw(url: string, method: string, path: string, headers: Record<string, string> = {}, body?: string | Buffer): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method, headers: { ...headers, ...(body === undefined ? {} : { 'content-length': String(Buffer.byteLength(body)) }) }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function secured(t: any, a: Answer, what: string): void {
  t.equal(a.headers['content-security-policy'], CSP, `${what}: the CSP`);
  t.notMatch(String(a.headers['content-security-policy']), /unsafe-inline|unsafe-eval/, `${what}: no unsafe script source`);
  t.equal(a.headers['x-frame-options'], 'DENY', `${what}: X-Frame-Options`);
  t.equal(a.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
  t.equal(a.headers['referrer-policy'], 'no-referrer', `${what}: Referrer-Policy`);
}

function error(t: any, a: Answer, status: number, code: string, what: string): void {
  t.equal(a.status, status, `${what}: ${status}`);
  t.equal(JSON.parse(a.body).error.code, code, `${what}: ${code}`);
  secured(t, a, what);
}

const json = { 'content-type': 'application/json' };

t.test('every status of the console carries the security headers', async (t) => {
  const redis = await startRedis();
  t.teardown(() => redis.stop());
  const file = join(dir, 'gw.yaml');
  await writeFile(file, YAML.stringify({
    server: { host: '127.0.0.1', port: 0 },
    admin: { token: TOKEN, max_token_failures: 3 },
    store: { kind: 'redis', url: redis.url, prefix: `hdr${Date.now()}:`, timeout_ms: 300 },
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'echo-small', provider: 'echo' }],
  }));
  const gw = await serveChild(t, file);
  const url = gw.url;

  const page = await raw(url, 'GET', '/console/');
  t.equal(page.status, 200);
  secured(t, page, '200 page');
  secured(t, await raw(url, 'GET', '/console/api/info'), '200 API');
  const redirect = await raw(url, 'GET', '/console');
  t.equal(redirect.status, 302);
  secured(t, redirect, '302 redirect');
  const js = await raw(url, 'GET', '/console/assets/console.js');
  const notModified = await raw(url, 'GET', '/console/assets/console.js', { 'if-none-match': String(js.headers.etag) });
  t.equal(notModified.status, 304);
  t.equal(notModified.headers['cache-control'], 'no-cache', '304: the asset\'s own caching');
  secured(t, notModified, '304');

  error(t, await raw(url, 'GET', '/console/assets/nope.js'), 404, 'unknown_url', '404 asset');
  error(t, await raw(url, 'GET', '/console/api/session'), 401, 'not_signed_in', '401 no session');
  error(t, await raw(url, 'GET', '/console/api/session', { cookie: 'tg_console=forged.value' }), 401, 'not_signed_in', '401 forged cookie');
  error(t, await raw(url, 'DELETE', '/console/api/info'), 405, 'method_not_allowed', '405');
  error(t, await raw(url, 'POST', '/console/api/login', json, '{"token":'), 400, 'invalid_json', '400 broken JSON');
  error(t, await raw(url, 'POST', '/console/api/login', { 'content-type': 'text/plain' }, 'x'), 415, 'unsupported_media_type', '415');
  error(t, await raw(url, 'POST', '/console/api/login', json, JSON.stringify({ token: 'x'.repeat(9000) })), 413, 'request_too_large', '413');

  const login = await raw(url, 'POST', '/console/api/login', json, JSON.stringify({ token: TOKEN }));
  t.equal(login.status, 200);
  secured(t, login, '200 sign-in');
  const cookie = /^(tg_console=[^;]+)/.exec(String(login.headers['set-cookie']?.[0]))![1]!;
  error(t, await raw(url, 'POST', '/console/api/logout', { cookie }), 403, 'csrf_failed', '403 no CSRF token');
  error(t, await raw(url, 'GET', '/console/api/nope', { cookie }), 404, 'unknown_url', '404 signed in');

  // Wrong tokens up to the limit are 401, then 429 for this address.
  for (let i = 0; i < 3; i++) error(t, await raw(url, 'POST', '/console/api/login', json, JSON.stringify({ token: `wrong-${i}` })), 401, 'invalid_api_key', `401 wrong token ${i}`);
  const limited = await raw(url, 'POST', '/console/api/login', json, JSON.stringify({ token: TOKEN }));
  error(t, limited, 429, 'rate_limit_exceeded', '429');
  t.ok(Number(limited.headers['retry-after']) > 0, '429: Retry-After');

  // The store gone: a session cannot be checked.
  await redis.halt();
  error(t, await raw(url, 'GET', '/console/api/session', { cookie }), 503, 'service_unavailable', '503 store down');
});

t.test('a 500 (the console bundle cannot be read) carries them too', async (t) => {
  // A copy of the package whose dist/console/console.js is a folder: reading it fails (EISDIR).
  const pkg = join(dir, 'pkg');
  await mkdir(join(pkg, 'dist', 'console', 'console.js'), { recursive: true });
  await cp(join(ROOT, 'dist', 'lib'), join(pkg, 'dist', 'lib'), { recursive: true });
  await cp(join(ROOT, 'bin'), join(pkg, 'bin'), { recursive: true });
  await copyFile(join(ROOT, 'package.json'), join(pkg, 'package.json'));
  await copyFile(join(ROOT, 'dist', 'console', 'console.css'), join(pkg, 'dist', 'console', 'console.css'));
  await symlink(join(ROOT, 'node_modules'), join(pkg, 'node_modules'));
  const file = join(dir, 'broken.yaml');
  await writeFile(file, YAML.stringify({ server: { host: '127.0.0.1', port: 0 }, admin: { token: TOKEN }, providers: { echo: { kind: 'echo' } }, models: [{ id: 'm', provider: 'echo' }] }));
  const proc = spawn(process.execPath, [join(pkg, 'bin', 'tollgate.js'), 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TOLLGATE_LOG_LEVEL: 'error' } });
  t.teardown(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  for (let i = 0; i < 1200 && !/listening on (\S+)/.test(out) && proc.exitCode === null; i++) await sleep(25);
  const url = /listening on (\S+)/.exec(out)?.[1];
  if (url === undefined) throw new Error(`the gateway did not start: ${out}`);
  const broken = await raw(url, 'GET', '/console/assets/console.js');
  error(t, broken, 500, 'internal_error', '500');
  t.notMatch(broken.body, /EISDIR|\/dist\//, 'the cause stays in the log');
});

/** One request with its path exactly as given: through `path`, never a WHATWG URL (which resolves %2e%2e and reads \\ as /). */
function rawPath(url: string, path: string): Promise<Answer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ host: u.hostname, port: u.port, method: 'GET', path, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: text }));
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('a console path the path normaliser refuses as it came is a console answer: 400 with the headers', async (t) => {
  const file = join(dir, 'paths.yaml');
  await writeFile(file, YAML.stringify({
    server: { host: '127.0.0.1', port: 0 }, admin: { token: TOKEN },
    providers: { echo: { kind: 'echo' } }, models: [{ id: 'echo-small', provider: 'echo' }],
  }));
  const url = (await serveChild(t, file)).url;
  for (const path of ['/console/%2e%2e/x', '/CONSOLE/%2E%2E/admin/accounts', '/Console/a\\b', '//console/%5c/x', '/console/api/info#x', '/console%2F..%2Fx', '/console/%2e%2e/x?next=1']) {
    const a = await rawPath(url, path);
    t.equal(a.status, 400, `${path}: 400`);
    t.equal(a.headers['content-type'], 'application/json', `${path}: JSON`);
    const e = JSON.parse(a.body);
    t.match(e, { code: 'invalid_value', param: null, type: 'invalid_request_error', error: { code: 'invalid_value', param: null, type: 'invalid_request_error' } }, `${path}: the envelope`);
    t.ok(a.headers['x-request-id'], `${path}: x-request-id`);
    t.equal(e.request_id, a.headers['x-request-id']);
    secured(t, a, path);
  }
  // Not the console's: its refusal stays without them (they belong to the console alone).
  const v1 = await rawPath(url, '/v1/%2e%2e/console');
  t.equal(v1.status, 400);
  t.equal(v1.headers['content-security-policy'], undefined, 'a /v1 refusal: no console CSP');
  t.equal(v1.headers['x-frame-options'], undefined);
});
