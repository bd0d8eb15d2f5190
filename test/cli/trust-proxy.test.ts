// server.trust_proxy from a YAML file, as an operator runs it (`tollgate serve --config FILE`),
// with a key whose allowed_ips is 203.0.113.0/24 (CONTRACT section 8, changed 2026-11-27):
// each form reads the X-Forwarded-For entry its trusted hops appended, never the client's own
// left entries; an entry that must be read but is no address is refused 403 ip_not_allowed.
// `check` and `serve` refuse a bad CIDR with a `server.trust_proxy[i]: message` line.

import t from 'tap';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEMO_KEY } from '../helpers/gateway.js';
import { BIN, serveChild } from '../helpers/child.js';

const ADMIN = 'trust-proxy-admin';
const dir = await mkdtemp(join(tmpdir(), 'tollgate-trust-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));

function yaml(trust: string): string {
  return `server:
  port: 0
  trust_proxy: ${trust}
admin:
  token: ${ADMIN}
accounts:
  - { id: demo, plan: free, wallet_units: 1000000, keys: [${DEMO_KEY}] }
plans:
  free: {}
providers:
  echo: { kind: echo }
models:
  - { id: echo-small, provider: echo }
`;
}

async function serve(t: any, name: string, trust: string): Promise<{ url: string; key: string }> {
  const file = join(dir, `${name}.yaml`);
  await writeFile(file, yaml(trust));
  const { url } = await serveChild(t, file);
  const res = await fetch(`${url}/admin/accounts/demo/keys`, {
    method: 'POST', headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
    body: JSON.stringify({ allowed_ips: ['203.0.113.0/24', '2001:db8::/32'] }),
  });
  t.equal(res.status, 201, 'a key with allowed_ips');
  return { url, key: ((await res.json()) as any).key };
}

async function wallet(url: string): Promise<number> {
  return ((await (await fetch(`${url}/admin/accounts/demo`, { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as any).balance_units;
}

/** Asks with these X-Forwarded-For lines; the status and code of the answer. */
async function ask(url: string, key: string, xff: string[]): Promise<string> {
  const headers = new Headers({ authorization: `Bearer ${key}`, 'content-type': 'application/json' });
  for (const v of xff) headers.append('x-forwarded-for', v);
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers, body: JSON.stringify({ model: 'echo-small', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
  });
  const body = (await res.json()) as any;
  if (res.status !== 200) {
    if (body.error?.code !== body.code || body.type !== 'permission_error' || body.request_id !== res.headers.get('x-request-id')) {
      throw new Error(`not the envelope: ${JSON.stringify(body)}`);
    }
  }
  return res.status === 200 ? '200' : `${res.status} ${body.code}`;
}

const FORMS: Array<[string, string, Array<[string, string[], string]>]> = [
  ['false', 'false', [
    ['the header is ignored: the socket (127.0.0.1) is matched', ['203.0.113.9'], '403 ip_not_allowed'],
  ]],
  ['true', 'true', [
    ['the rightmost entry', ['10.1.1.1, 203.0.113.9'], '200'],
    ['an allowed address written on the left does not pass', ['203.0.113.9, 10.1.1.1'], '403 ip_not_allowed'],
    ['several headers are one list', ['203.0.113.9', '10.1.1.1'], '403 ip_not_allowed'],
    ['IPv6', ['10.1.1.1', '[2001:db8::5]:443'], '200'],
    ['garbage where the address is read', ['203.0.113.9, unknown'], '403 ip_not_allowed'],
  ]],
  ['2', '2', [
    ['the second from the right', ['10.1.1.1, 203.0.113.9, 10.0.0.2'], '200'],
    ['the client-written entry is not it', ['203.0.113.9, 10.1.1.1, 10.0.0.2'], '403 ip_not_allowed'],
  ]],
  ['cidrs', '[127.0.0.0/8, 10.0.0.0/8]', [
    ['the rightmost entry outside them', ['198.51.100.1, 203.0.113.9, 10.0.0.2, 10.9.9.9'], '200'],
    ['a public hop nearer than the allowed one decides', ['203.0.113.9, 198.51.100.1, 10.0.0.2'], '403 ip_not_allowed'],
    ['IPv4-mapped proxies are inside', ['203.0.113.9, ::ffff:10.0.0.2'], '200'],
    ['garbage while walking', ['203.0.113.9, junk, 10.0.0.2'], '403 ip_not_allowed'],
  ]],
];

for (const [name, trust, cases] of FORMS) {
  t.test(`trust_proxy: ${trust}`, async (t) => {
    const { url, key } = await serve(t, name, trust);
    const before = await wallet(url);
    let charged = 0;
    for (const [what, xff, want] of cases) {
      const got = await ask(url, key, xff);
      t.equal(got, want, what);
      if (got === '200') charged++;
    }
    if (charged === 0) t.equal(await wallet(url), before, 'the refusals charged nothing');
  });
}

function run(args: string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { PATH: process.env.PATH }, timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, out: `${stdout}${stderr}` });
    });
  });
}

t.test('check and serve refuse a bad trust_proxy with path: message lines', async (t) => {
  const file = join(dir, 'bad.yaml');
  await writeFile(file, yaml('[10.0.0.0/8, 10.0.0.0/33, not-an-address]'));
  for (const cmd of ['check', 'serve']) {
    const r = await run([cmd, '--config', file]);
    t.equal(r.code, 1, `${cmd}: exit 1`);
    t.match(r.out, /^\s*server\.trust_proxy\[1\]: must be an IPv4 or IPv6 address or CIDR/m, `${cmd}: the bad CIDR named by index`);
    t.match(r.out, /^\s*server\.trust_proxy\[2\]: must be an IPv4 or IPv6 address or CIDR/m);
    t.notMatch(r.out, /trust_proxy\[0\]/, 'the good one is not named');
    t.notMatch(r.out, /\n\s+at /, 'no stack trace');
  }
  await writeFile(file, yaml('-1'));
  const r = await run(['check', '--config', file]);
  t.equal(r.code, 1);
  t.match(r.out, /^server\.trust_proxy: must be true, false, a number of proxy hops \(0 to 64\) or a list of CIDRs$/m);
});
