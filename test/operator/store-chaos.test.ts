// No store fault, at any moment, ends or stalls the gateway (CONTRACT sections 9 and 21; issue
// #40 finding 2). `tollgate serve` from a YAML file on a redis-server this test starts (append-
// only, fsynced: a restart keeps what was acknowledged), with alerts to a webhook receiver,
// while the test pauses Redis with SIGSTOP/SIGCONT at random moments (a fixed seed) and now and
// then stops and restarts it, under a mix of traffic: admin writes (accounts, top-ups, keys
// created, patched, rotated and revoked, teams created, patched and deleted, sessions revoked),
// console writes (sign-in, config check, a key created through the session, sign-out), chat
// completions through the openai SDK (plain and streamed), usage reads (self-service and admin)
// and alert reads. Throughout: the process never exits, never logs an unhandled rejection,
// answers only contract statuses (never a 500, never a dropped connection, never a request left
// unanswered for 15 s) and /healthz always answers. After recovery: every write answered 2xx has its audit entry; every
// top-up, account, team and key creation answered 503 either landed with its entry or not at
// all (a top-up retried with its idempotency key tells which, and credits once).

import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { startRedis } from '../helpers/redis.js';
import { ADMIN, KEY, PRICE, fakeOpenAI, operatorConfig, serveFile, statusOf } from '../helpers/operator.js';

const SEED = Number(process.env.TOLLGATE_PROPERTY_SEED ?? 20261206);
/** Chaos lasts this long; then Redis is left alone and the checks run. */
const CHAOS_MS = Number(process.env.TOLLGATE_CHAOS_MS ?? 20_000);

/** A small seeded generator (mulberry32): the same pauses on every run. */
function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = Math.imul(a ^ (a >>> 15), 1 | a);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const redis = await startRedis({ persist: true });
const upstream = await fakeOpenAI('chaos');
let deliveries = 0;
const receiver = createServer((req, res) => { req.resume(); req.on('end', () => { deliveries++; res.writeHead(204).end(); }); });
await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
t.teardown(async () => {
  redis.thaw();
  await upstream.close();
  await new Promise((r) => receiver.close(r));
  await redis.stop();
});

/** Statuses the contract gives each kind of request (a 500 or a dropped connection never is one). */
const ALLOWED: Record<string, number[]> = {
  write: [200, 201, 204, 404, 409, 503],
  read: [200, 503],
  console: [200, 204, 401, 503],
  chat: [200, 402, 429, 503],
};

interface Outcome { kind: string; what: string; status: number | string; id: string; detail?: unknown }

t.test('Redis paused, stopped and restarted at random moments under mixed traffic: the gateway lives, answers the contract, and loses no audit entry', async (t) => {
  const served = await serveFile(t, operatorConfig({
    server: { port: 0, drain_timeout_ms: 5000, sse_keepalive_ms: 60_000 },
    store: { kind: 'redis', url: redis.url, prefix: 'chaos:', timeout_ms: 250, settle_wait_ms: 1000 },
    plans: { free: { paid: false, requests_per_minute: 100_000 } },
    accounts: [{ id: 'demo', plan: 'free', wallet_units: 100_000_000, keys: [KEY] }, { id: 'wallet', plan: 'free', wallet_units: 0 }],
    providers: { oai: { kind: 'openai', base_url: upstream.baseUrl } },
    models: [{ id: 'm-chaos', provider: 'oai', upstream_model: 'upstream-model', price: PRICE }],
    alerts: {
      thresholds: [50, 80, 100], wallet_low_units: 99_999_990,
      webhooks: [{ url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, secret: 'chaos-webhook-secret-0123456789' }],
    },
  }));
  const url = served.url;
  t.equal(await statusOf(`${url}/readyz`, 200), 200, 'ready');
  const rnd = random(SEED);
  const outcomes: Outcome[] = [];
  let n = 0;
  let stopAt = Date.now() + CHAOS_MS;

  /**
   * One request with its own request id (the admin token unless `headers` carry a cookie or an
   * authorization of their own); a dropped connection or a hang is an outcome too.
   */
  async function call(kind: string, what: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Outcome & { body: any; res?: Response }> {
    const id = `chaos-${++n}`;
    const auth: Record<string, string> = headers.cookie !== undefined || headers.authorization !== undefined ? {} : { authorization: `Bearer ${ADMIN}` };
    try {
      const res = await fetch(`${url}${path}`, {
        method, signal: AbortSignal.timeout(15_000),
        headers: { ...auth, 'x-request-id': id, ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      let parsed: any = null;
      try { parsed = text === '' ? null : JSON.parse(text); } catch { parsed = text; }
      const o = { kind, what, status: res.status, id, body: parsed, res };
      outcomes.push(o);
      return o;
    } catch (err) {
      const o = { kind, what, status: `no answer: ${(err as Error).message}`, id, body: null };
      outcomes.push(o);
      return o;
    }
  }

  // ---- the faults ------------------------------------------------------------------------
  let restarts = 0;
  let pauses = 0;
  const chaos = (async () => {
    while (Date.now() < stopAt) {
      await sleep(50 + rnd() * 400);
      if (rnd() < 0.1) {
        await redis.halt();
        await sleep(100 + rnd() * 600);
        await redis.restart();
        restarts++;
      } else {
        redis.freeze();
        await sleep(50 + rnd() * 800);
        redis.thaw();
        pauses++;
      }
    }
  })();

  // ---- the traffic ---------------------------------------------------------------------------
  const credits: Array<{ id: string; key: string; units: number; status: number | string }> = [];
  const created: Array<{ kind: 'account' | 'team' | 'key'; name: string; id: string; status: number | string }> = [];
  /** Plaintexts of keys created (201), and their ids: only these are patched, rotated and revoked. */
  const keys: string[] = [];
  const keyIds: string[] = [];
  const teams: string[] = [];
  const loops: Array<Promise<void>> = [];
  const loop = (body: (i: number) => Promise<void>) => loops.push((async () => { for (let i = 0; Date.now() < stopAt; i++) await body(i); })());

  loop(async (i) => { // top-ups of distinct amounts to an account nothing else touches
    const key = `chaos-credit-${i}`;
    const o = await call('write', 'credit', 'POST', '/admin/accounts/wallet/credits', { units: i + 1, idempotency_key: key });
    credits.push({ id: o.id, key, units: i + 1, status: o.status });
  });
  loop(async (i) => { // accounts, teams and keys created, keys patched, rotated and revoked
    const name = `c${i}`;
    const step = i % 6;
    if (step === 0) {
      const o = await call('write', 'account', 'POST', '/admin/accounts', { id: `chaos-acct-${name}`, plan: 'free' });
      created.push({ kind: 'account', name: `chaos-acct-${name}`, id: o.id, status: o.status });
    } else if (step === 1) {
      const o = await call('write', 'team', 'POST', '/admin/accounts/demo/teams', { id: `chaos-team-${name}`, budget: { units: 1000, period: 'day' } });
      created.push({ kind: 'team', name: `chaos-team-${name}`, id: o.id, status: o.status });
      if (o.status === 201) teams.push(`chaos-team-${name}`);
    } else if (step === 2) {
      const team = teams[teams.length - 1];
      const o = await call('write', 'key', 'POST', '/admin/accounts/demo/keys', { name: `chaos-key-${name}`, budget: { units: 40, period: 'day' }, ...(team === undefined ? {} : { team }) });
      created.push({ kind: 'key', name: `chaos-key-${name}`, id: o.id, status: o.status });
      if (o.status === 201) { keys.push(o.body.key); keyIds.push(o.body.id); }
    } else if (step === 3) {
      const k = keyIds[keyIds.length - 1];
      if (k !== undefined) await call('write', 'patch', 'PATCH', `/admin/keys/${k}`, { limits: { requests_per_minute: 1000 + i } });
      if (k !== undefined) await call('write', 'rotate', 'POST', `/admin/keys/${k}/rotate`, { grace_seconds: 60 });
    } else if (step === 4) {
      const team = teams.shift();
      if (team !== undefined) await call('write', 'team-patch', 'PATCH', `/admin/teams/${team}`, { name: `renamed ${i}` });
      if (team !== undefined) await call('write', 'team-delete', 'DELETE', `/admin/teams/${team}`);
      await call('write', 'session-revoke', 'POST', `/admin/sessions/chaos-sid-${i}/revoke`);
    } else if (step === 5 && keyIds.length > 2) {
      await call('write', 'revoke', 'DELETE', `/admin/keys/${keyIds.shift()!}`);
      keys.shift();
    }
  });
  loop(async (i) => { // the console: sign in, check a config, create a key, sign out
    const login = await call('console', 'login', 'POST', '/console/api/login', { token: ADMIN }, { cookie: '' });
    const cookie = login.res?.headers.getSetCookie().map((c) => /^(tg_console=[^;]+)/.exec(c)?.[1]).find((c) => c !== undefined);
    if (login.status !== 200 || cookie === undefined) return;
    const session = await call('console', 'session', 'GET', '/console/api/session', undefined, { cookie });
    if (session.status !== 200) return;
    const h = { cookie, 'x-csrf-token': session.body.csrf };
    await call('console', 'check', 'POST', '/console/api/config/check', { yaml: 'server: {}' }, h);
    const o = await call('write', 'console-key', 'POST', '/admin/accounts/demo/keys', { name: `chaos-console-key-${i}` }, h);
    created.push({ kind: 'key', name: `chaos-console-key-${i}`, id: o.id, status: o.status });
    await call('console', 'logout', 'POST', '/console/api/logout', undefined, h);
  });
  for (let w = 0; w < 2; w++) {
    loop(async (i) => { // chats through the openai SDK, plain and streamed, with the seeded key or a created one
      const apiKey = i % 3 === 0 && keys.length > 0 ? keys[Math.floor(rnd() * keys.length)]! : KEY;
      const openai = new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0, timeout: 15_000 });
      const id = `chaos-chat-${w}-${i}`;
      try {
        if (i % 2 === 0) {
          await openai.chat.completions.create({ model: 'm-chaos', messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-request-id': id } });
        } else {
          const stream = await openai.chat.completions.create({ model: 'm-chaos', messages: [{ role: 'user', content: 'hi' }], stream: true }, { headers: { 'x-request-id': id } });
          for await (const _ of stream) { /* drain */ }
        }
        outcomes.push({ kind: 'chat', what: 'chat', status: 200, id });
      } catch (err) {
        const e = err as { status?: number; code?: string; message: string };
        // A revoked key: 401 is its contract answer. A stream whose answer had begun ends with
        // the error as an event (the SDK's APIError without a status, its code the envelope's).
        const status = e.status === 401 && apiKey !== KEY ? 200
          : e.status ?? (e.code === 'service_unavailable' ? 503 : `no answer: ${e.message}`);
        outcomes.push({ kind: 'chat', what: 'chat', status, id, detail: e.code });
      }
    });
  }
  loop(async (i) => { // usage and alert reads
    const paths = ['/admin/usage?account=demo', '/admin/usage/records?account=demo&limit=50', '/admin/alerts?limit=20', '/admin/accounts/demo', '/admin/usage/hourly?account=demo', '/admin/audit?limit=20'];
    await call('read', 'admin-read', 'GET', paths[i % paths.length]!);
    const self = i % 2 === 0 ? '/v1/key' : '/v1/usage';
    const o = await call('read', 'self', 'GET', self, undefined, { authorization: `Bearer ${KEY}` });
    if (o.status === 429) o.status = 200; // requests_per_minute: a contract answer
  });
  let slowestHealth = 0;
  loop(async () => { // /healthz never stalls, whatever Redis does (no timing is asserted: a loaded host is slow)
    const started = performance.now();
    const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(10_000) }).then((r) => r.status, (e: Error) => e.message);
    slowestHealth = Math.max(slowestHealth, performance.now() - started);
    outcomes.push({ kind: 'health', what: 'healthz', status: res, id: '' });
    await sleep(100);
  });

  await chaos;
  stopAt = 0;
  await Promise.all(loops);
  redis.thaw();
  t.comment(`${pauses} pauses and ${restarts} restarts of Redis; ${outcomes.length} requests; ${deliveries} webhook deliveries; /healthz at worst ${Math.round(slowestHealth)} ms`);
  t.ok(pauses > 5 && restarts > 0, 'Redis was paused and restarted');

  // ---- during: the contract ---------------------------------------------------------------------
  const allowed = (o: Outcome) => (o.kind === 'health' ? [200] : ALLOWED[o.kind] ?? []).includes(o.status as number);
  const bad = outcomes.filter((o) => !allowed(o));
  t.strictSame(bad.slice(0, 10).map((o) => `${o.kind} ${o.what} ${o.id}: ${o.status} ${JSON.stringify(o.detail ?? '')}`), [], 'only contract statuses, every request answered, /healthz always');
  t.ok(outcomes.some((o) => o.status === 503), 'some requests met the faults (503)');
  t.ok(outcomes.filter((o) => o.kind === 'write' && typeof o.status === 'number' && o.status < 300).length > 20, 'and many writes got through');
  t.equal(served.proc.exitCode, null, 'the gateway never exited');
  t.notMatch(served.output(), /unhandled|uncaught/i, 'and never logged an unhandled rejection');

  // ---- after recovery: the audit log -----------------------------------------------------------
  t.equal(await statusOf(`${url}/readyz`, 200, 30_000), 200, 'ready again');
  const audit = new Set<string>();
  let cursor: string | null = null;
  do {
    const page = await call('read', 'audit', 'GET', `/admin/audit?limit=1000${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
    t.equal(page.status, 200);
    if (page.status !== 200) break;
    for (const e of page.body.events) audit.add(e.request_id);
    cursor = page.body.next_cursor;
  } while (cursor !== null);
  const unlogged = outcomes.filter((o) => (o.kind === 'write' || (o.kind === 'console' && o.what !== 'session')) && typeof o.status === 'number' && o.status >= 200 && o.status < 300 && !audit.has(o.id));
  t.strictSame(unlogged.map((o) => `${o.what} ${o.id}`), [], 'every write answered 2xx has its audit entry');

  // A top-up answered 503: its retry says whether it had landed; its entry must say the same.
  const before = (await call('read', 'wallet', 'GET', '/admin/accounts/wallet')).body?.balance_units as number;
  let expected = 0;
  let mismatched = 0;
  for (const c of credits) {
    if (c.status === 200) { expected += c.units; continue; }
    if (c.status !== 503) continue;
    const retry = await call('write', 'credit-retry', 'POST', '/admin/accounts/wallet/credits', { units: c.units, idempotency_key: c.key });
    t.equal(retry.status, 200, `${c.id}: the retry is answered`);
    const landed = retry.body?.applied === false;
    if (landed !== audit.has(c.id)) mismatched++;
    expected += c.units;
  }
  t.equal(mismatched, 0, 'each top-up answered 503 landed with its entry, or neither');
  const after = (await call('read', 'wallet', 'GET', '/admin/accounts/wallet')).body?.balance_units as number;
  t.equal(after, expected, `every top-up credited exactly once (${credits.length} top-ups, ${before} before the retries)`);

  // Accounts, teams and keys answered 503: created with their entry, or neither.
  // (Only what was answered 201 is ever revoked or deleted, so these are as their creation left them.)
  const demoKeys = ((await call('read', 'keys', 'GET', '/admin/accounts/demo/keys')).body?.keys ?? []).map((k: any) => k.name);
  for (const c of created.filter((x) => x.status === 503)) {
    let exists: boolean;
    if (c.kind === 'account') exists = (await call('read', 'account', 'GET', `/admin/accounts/${c.name}`)).status === 200;
    else if (c.kind === 'team') exists = (await call('read', 'team', 'GET', `/admin/teams/${c.name}`)).status === 200;
    else exists = demoKeys.includes(c.name);
    t.equal(audit.has(c.id), exists, `${c.kind} ${c.name} (answered 503): ${exists ? 'created with its entry' : 'neither'}`);
  }
  t.equal(served.proc.exitCode, null, 'still running');
});
