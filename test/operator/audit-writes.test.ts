// Every write through /admin or the console is in the audit log before it is answered, in the
// same store step as the write (CONTRACT section 21; issue #40 finding 2), through `tollgate
// serve` from a YAML file:
// - Redis (its own redis-server): the audit log's stream broken (a string where the stream is):
//   a team's creation used to leave its audit append unawaited, and the rejection ended the
//   gateway; a top-up was credited and answered 503, unaudited. Now both are answered as done
//   and their events reach the log once it is mended. Then top-ups while Redis is paused with
//   SIGSTOP for 0.7 s at random moments: each answered 200 has its event; each answered 503
//   was credited with its event or not at all (amounts of distinct powers of two tell which);
//   retrying each 503 with its idempotency key credits it exactly once.
// - The memory store with a path: each write of the admin API and the console (a config check
//   included, unaudited before) has its event in the same journal entry as the write, and the
//   log survives a SIGKILL.

import t from 'tap';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { startRedis } from '../helpers/redis.js';
import { ADMIN_TOKEN, startConsole, tokenSignIn, withSession } from '../helpers/console.js';
import { serveChild } from '../helpers/child.js';
import { statusOf } from '../helpers/operator.js';

const redis = await startRedis();
t.teardown(() => redis.stop());

let n = 0;
/** A request through the admin API with its own request id; the answer's status, body and id. */
async function admin(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any; id: string }> {
  const id = `aw-${process.pid}-${++n}`;
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'x-request-id': id, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? null : JSON.parse(text), id };
}

/** Every request id in the audit log. */
async function auditIds(url: string): Promise<Set<string>> {
  const ids = new Set<string>();
  let cursor: string | null = null;
  do {
    const page = await admin(url, 'GET', `/admin/audit?limit=1000${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`);
    if (page.status !== 200) throw new Error(`GET /admin/audit: ${page.status} ${JSON.stringify(page.body)}`);
    for (const e of page.body.events) ids.add(e.request_id);
    cursor = page.body.next_cursor;
  } while (cursor !== null);
  return ids;
}

function alive(t: any, proc: import('node:child_process').ChildProcess, output: () => string): void {
  t.equal(proc.exitCode, null, 'the gateway is still running');
  t.notMatch(output(), /unhandled|uncaught/i, 'and logged no unhandled rejection');
}

t.test('redis: a broken audit log ends nothing; team writes and top-ups are answered as done and reach the log once mended', async (t) => {
  const prefix = `aw-broken-${process.pid}:`;
  const rig = await startConsole(t, { store: { kind: 'redis', url: redis.url, prefix, timeout_ms: 300 } });
  t.equal(await statusOf(`${rig.url}/readyz`, 200), 200);
  const direct = new Redis(redis.url);
  t.teardown(() => direct.disconnect());
  await direct.set(`${prefix}{audit}`, 'not a stream');

  const team = await admin(rig.url, 'POST', '/admin/accounts/acme/teams', { id: 'red-team', name: 'Red' });
  t.equal(team.status, 201, 'the team is created: its event waits in the account\'s slot');
  const patched = await admin(rig.url, 'PATCH', '/admin/teams/red-team', { name: 'Reds' });
  t.equal(patched.status, 200);
  const credit = await admin(rig.url, 'POST', '/admin/accounts/acme/credits', { units: 1000, idempotency_key: 'broken-log-1' });
  t.equal(credit.status, 200, 'the top-up is answered as done');
  t.equal(credit.body.applied, true);
  const deleted = await admin(rig.url, 'DELETE', '/admin/teams/red-team');
  t.equal(deleted.status, 204);
  await sleep(200);
  alive(t, rig.gw.proc, rig.gw.output);

  const unreadable = await admin(rig.url, 'GET', '/admin/audit');
  t.equal(unreadable.status, 503, 'the log cannot be read while its stream is broken');
  t.equal(unreadable.body.error.code, 'service_unavailable');
  await direct.del(`${prefix}{audit}`);
  const ids = await auditIds(rig.url);
  for (const w of [team, patched, credit, deleted]) t.ok(ids.has(w.id), `${w.id}: its event is in the log`);
  const acme = await admin(rig.url, 'GET', '/admin/accounts/acme');
  t.equal(acme.body.balance_units, 1_000_000 + 1000, 'credited once');
});

t.test('redis: top-ups while Redis is paused at random moments: each 200 has its event, each 503 landed with its event or not at all, and a retry credits once', async (t) => {
  const prefix = `aw-paused-${process.pid}:`;
  const rig = await startConsole(t, { store: { kind: 'redis', url: redis.url, prefix, timeout_ms: 300, settle_wait_ms: 500 } });
  t.equal(await statusOf(`${rig.url}/readyz`, 200), 200);
  const before = (await admin(rig.url, 'GET', '/admin/accounts/acme')).body.balance_units as number;
  const rounds = 16;
  const outcomes: Array<{ i: number; status: number; id: string }> = [];
  // A fixed sequence of pauses: each round pauses Redis 0 to 39 ms after the top-up is sent.
  const delays = Array.from({ length: rounds }, (_, i) => (i * 17) % 40);
  for (let i = 0; i < rounds; i++) {
    const sent = admin(rig.url, 'POST', '/admin/accounts/acme/credits', { units: 2 ** i, idempotency_key: `paused-${i}` });
    await sleep(delays[i]!);
    redis.freeze();
    await sleep(700);
    redis.thaw();
    const r = await sent;
    t.ok([200, 503].includes(r.status), `round ${i}: 200 or 503 (got ${r.status})`);
    if (r.status === 503) {
      t.equal(r.body.error.code, 'service_unavailable');
    }
    outcomes.push({ i, status: r.status, id: r.id });
  }
  alive(t, rig.gw.proc, rig.gw.output);
  t.equal(await statusOf(`${rig.url}/readyz`, 200), 200, 'recovered');
  const ids = await auditIds(rig.url);
  const balance = (await admin(rig.url, 'GET', '/admin/accounts/acme')).body.balance_units as number;
  const landed = balance - before;
  for (const o of outcomes) {
    const credited = (landed & (2 ** o.i)) !== 0;
    if (o.status === 200) {
      t.ok(credited && ids.has(o.id), `round ${o.i}: answered 200, credited and in the log`);
    } else {
      t.equal(ids.has(o.id), credited, `round ${o.i}: answered 503, ${credited ? 'credited with its event' : 'neither credited nor logged'}`);
    }
  }
  for (const o of outcomes.filter((x) => x.status === 503)) {
    const retry = await admin(rig.url, 'POST', '/admin/accounts/acme/credits', { units: 2 ** o.i, idempotency_key: `paused-${o.i}` });
    t.equal(retry.status, 200, `round ${o.i}: the retry is answered`);
    t.equal(retry.body.applied, (landed & (2 ** o.i)) === 0, 'applied only if the first did not land');
  }
  const after = (await admin(rig.url, 'GET', '/admin/accounts/acme')).body.balance_units as number;
  t.equal(after - before, 2 ** rounds - 1, 'every top-up credited exactly once');
});

t.test('memory with a path: each write and its event are one journal entry, and the log survives a SIGKILL', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-aw-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const rig = await startConsole(t, { store: { kind: 'memory', path: dir } });
  let gw = rig.gw;
  const url = gw.url;
  t.equal(await statusOf(`${url}/readyz`, 200), 200);

  const writes = [
    await admin(url, 'POST', '/admin/accounts', { id: 'newco', plan: 'free' }),
    await admin(url, 'POST', '/admin/accounts/newco/credits', { units: 50, idempotency_key: 'mem-1' }),
    await admin(url, 'POST', '/admin/accounts/newco/credits', { units: 50, idempotency_key: 'mem-1' }),
    await admin(url, 'POST', '/admin/accounts/newco/teams', { id: 'blue', name: 'Blue' }),
    await admin(url, 'PATCH', '/admin/teams/blue', { name: 'Blues' }),
  ];
  const key = await admin(url, 'POST', '/admin/accounts/newco/keys', { name: 'k1', team: 'blue' });
  writes.push(key);
  writes.push(await admin(url, 'PATCH', `/admin/keys/${key.body.id}`, { name: 'k1b', team: null }));
  writes.push(await admin(url, 'POST', `/admin/keys/${key.body.id}/rotate`, { grace_seconds: 0 }));
  writes.push(await admin(url, 'DELETE', `/admin/keys/${key.body.id}`));
  writes.push(await admin(url, 'DELETE', '/admin/teams/blue'));
  writes.push(await admin(url, 'POST', '/admin/sessions/some-session/revoke'));
  for (const w of writes) t.ok(w.status >= 200 && w.status < 300, `${w.id}: ${w.status}`);

  // Console writes: a token sign-in, a config check, a sign-out.
  const s = await tokenSignIn(url);
  const check = await fetch(`${url}/console/api/config/check`, {
    method: 'POST', headers: { ...withSession(s, 'POST'), 'content-type': 'application/json', 'x-request-id': 'aw-console-check' }, body: JSON.stringify({ yaml: 'server: {}' }),
  });
  t.equal(check.status, 200, 'a config check');
  const out = await fetch(`${url}/console/api/logout`, { method: 'POST', headers: { ...withSession(s, 'POST'), 'x-request-id': 'aw-console-logout' } });
  t.equal(out.status, 204, 'a sign-out');

  const journal = (await readFile(join(dir, 'journal.jsonl'), 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l));
  const entryOf = (id: string) => journal.filter((e) => e.audit?.request_id === id);
  const ops = (id: string) => entryOf(id).map((e) => e.op);
  t.strictSame(ops(writes[0]!.id), ['account'], 'the account and its event: one entry');
  t.strictSame(ops(writes[1]!.id), ['credit'], 'the credit and its event: one entry');
  t.strictSame(ops(writes[2]!.id), ['audit'], 'the repeated credit: its event alone (nothing changed)');
  t.strictSame(ops(writes[3]!.id), ['team']);
  t.strictSame(ops(writes[4]!.id), ['teamupdate']);
  t.strictSame(ops(key.id), ['key']);
  t.strictSame(ops(writes[6]!.id), ['keyupdate']);
  t.strictSame(ops(writes[7]!.id), ['rotate']);
  t.strictSame(ops(writes[8]!.id), ['revoke']);
  t.strictSame(ops(writes[9]!.id), ['teamdelete']);
  t.strictSame(ops(writes[10]!.id), ['session']);
  t.strictSame(ops('aw-console-check'), ['audit'], 'the config check is audited');
  t.strictSame(ops('aw-console-logout'), ['session'], 'the sign-out and its event: one entry');

  gw.proc.kill('SIGKILL');
  await new Promise((r) => gw.proc.once('exit', r));
  gw = await serveChild(t, rig.file);
  const ids = await auditIds(gw.url);
  for (const id of [...writes.map((w) => w.id), 'aw-console-check', 'aw-console-logout']) t.ok(ids.has(id), `${id} is in the log after a SIGKILL`);
  const newco = await admin(gw.url, 'GET', '/admin/accounts/newco');
  t.equal(newco.body.balance_units, 50, 'credited once');
});
