// The console's test rig: a YAML config with the console and SSO (against test/helpers/
// oidc-provider.ts) served by `tollgate serve --config FILE` as a child process, and sign-ins
// over plain HTTP (the admin token, or the whole SSO round trip: /console/sso, the provider's
// /authorize, the callback) giving a session cookie and its CSRF token.

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { serveChild, type ChildGateway } from './child.js';
import { startProvider, type TestProvider } from './oidc-provider.js';

export const ADMIN_TOKEN = 'console-admin-token-0123456789';
export const WALLET = 1_000_000;

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

export interface ConsoleRig {
  gw: ChildGateway;
  url: string;
  op: TestProvider;
  file: string;
  config: Record<string, any>;
}

export function consoleConfig(port: number, issuer: string, extra: Record<string, any> = {}): Record<string, any> {
  return {
    server: { host: '127.0.0.1', port },
    admin: { token: ADMIN_TOKEN },
    console: {
      oidc: {
        issuer, client_id: 'tollgate-console', client_secret: 'op-client-secret',
        redirect_url: `http://127.0.0.1:${port}/console/callback`,
        roles_claim: 'roles', admin_values: ['tg-admin'], viewer_values: ['tg-viewer'], account_claim: 'tenant',
      },
    },
    plans: { free: { paid: false } },
    accounts: [
      { id: 'acme', plan: 'free', wallet_units: WALLET },
      { id: 'other-co', plan: 'free', wallet_units: WALLET },
    ],
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'echo-small', provider: 'echo', context_window: 8192, max_output_tokens: 256, price: { input_per_mtok: 1_000_000, output_per_mtok: 1_000_000 } }],
    ...extra,
  };
}

/**
 * The provider, then the gateway on a port chosen first (the provider must know the redirect
 * URL); `edit` changes the config made before it is written.
 */
export async function startConsole(t: any, extra: Record<string, any> = {}, env: NodeJS.ProcessEnv = {}, edit: (config: Record<string, any>) => void = () => {}): Promise<ConsoleRig> {
  const port = await freePort();
  const op = await startProvider(`http://127.0.0.1:${port}/console/callback`);
  t.teardown(() => op.close());
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-console-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const file = join(dir, 'tollgate.yaml');
  const config = consoleConfig(port, op.issuer, extra);
  edit(config);
  await writeFile(file, YAML.stringify(config));
  const gw = await serveChild(t, file, env);
  return { gw, url: gw.url, op, file, config };
}

export interface Signed { cookie: string; csrf: string; role: string; account: string | null }

function sessionCookie(res: Response): string | undefined {
  for (const c of res.headers.getSetCookie()) {
    const m = /^(tg_console=[^;]+)/.exec(c);
    if (m !== null && !c.includes('Max-Age=0')) return m[1];
  }
  return undefined;
}

async function session(url: string, cookie: string): Promise<Signed> {
  const s = await fetch(`${url}/console/api/session`, { headers: { cookie } });
  if (s.status !== 200) throw new Error(`session: ${s.status} ${await s.text()}`);
  const body = await s.json() as { csrf: string; role: string; account: string | null };
  return { cookie, csrf: body.csrf, role: body.role, account: body.account };
}

export async function tokenSignIn(url: string, token = ADMIN_TOKEN): Promise<Signed> {
  const res = await fetch(`${url}/console/api/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token }) });
  const cookie = sessionCookie(res);
  if (res.status !== 200 || cookie === undefined) throw new Error(`login: ${res.status}`);
  return session(url, cookie);
}

/** The SSO round trip for `user` (its claims), as a browser makes it; undefined when refused (with where it ended). */
export async function ssoSignIn(rig: ConsoleRig, user: Record<string, unknown>): Promise<Signed | { refused: string }> {
  rig.op.user = user;
  const start = await fetch(`${rig.url}/console/sso`, { redirect: 'manual' });
  const flow = start.headers.getSetCookie().map((c) => /^(tg_console_flow=[^;]+)/.exec(c)?.[1]).find((c) => c !== undefined);
  const authorize = await fetch(start.headers.get('location')!, { redirect: 'manual' });
  const callback = authorize.headers.get('location');
  if (callback === null) throw new Error(`authorize: ${authorize.status} ${await authorize.text()}`);
  const done = await fetch(callback, { redirect: 'manual', headers: flow === undefined ? {} : { cookie: flow } });
  const cookie = sessionCookie(done);
  if (cookie === undefined) return { refused: done.headers.get('location') ?? String(done.status) };
  return session(rig.url, cookie);
}

/** A request with a session: the cookie, and the CSRF token unless `csrf` says otherwise. */
export function withSession(s: Signed, method: string, csrf: string | null = s.csrf): Record<string, string> {
  const h: Record<string, string> = { cookie: s.cookie };
  if (method !== 'GET' && method !== 'HEAD' && csrf !== null) h['x-csrf-token'] = csrf;
  return h;
}
