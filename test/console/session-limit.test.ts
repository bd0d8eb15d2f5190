// A console session's requests per minute (CONTRACT section 21: a member's reads and exports
// count toward a per-session requests_per_minute like an admin's; issue #40 finding 3: members
// looped /console/api/usage/export without limit), through `tollgate serve --config FILE` with
// console.requests_per_minute: 8. Every request a session makes counts, to /console/api and to
// /admin with its cookie; a download one more for each page after its first (3,500 records: 4
// pages, each record read once, counted by tollgate_usage_records_read_total); beyond the
// limit, 429 rate_limit_exceeded with Retry-After, for an admin's session and a member's alike,
// one session's count apart from another's; the admin token (Bearer, the CLI) is not a session;
// signing out is never refused.

import t from 'tap';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ADMIN_TOKEN, ssoSignIn, startConsole, tokenSignIn, withSession, type Signed } from '../helpers/console.js';
import { metric } from '../helpers/operator.js';

const DAY = 86_400_000;
const PER_MINUTE = 8;
const RECORDS = 3500;

const dir = await mkdtemp(join(tmpdir(), 'tollgate-session-limit-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
// The history: 3,500 of acme's records over the last 10 days, in the store's day files.
const now = Date.now();
const days = new Map<string, string[]>();
for (let i = 0; i < RECORDS; i++) {
  const at = now - 60_000 - Math.floor((i * 10 * DAY) / RECORDS);
  const line = JSON.stringify({
    request_id: `seed-${i}`, at, account: 'acme', key_id: 'key_acme', team: null, model: 'echo-small', provider: 'echo', target: null,
    route: '/v1/chat/completions', status: 200, prompt_tokens: 3, cached_tokens: 0, completion_tokens: 4, units: 7, usage_source: 'upstream',
    duration_ms: 2, ttft_ms: null, queue_ms: 0,
  });
  const name = `${new Date(at).toISOString().slice(0, 10)}.jsonl`;
  days.set(name, [...(days.get(name) ?? []), line]);
}
await mkdir(join(dir, 'usage'), { recursive: true });
for (const [name, lines] of days) await writeFile(join(dir, 'usage', name), `${lines.join('\n')}\n`);

const rig = await startConsole(t, { store: { kind: 'memory', path: dir } }, {}, (c) => { c.console.requests_per_minute = PER_MINUTE; });
const { url } = rig;
const bearer = (path: string) => fetch(`${url}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
const asSession = (s: Signed, path: string, method = 'GET') => fetch(`${url}${path}`, { method, headers: withSession(s, method) });

/** The 429 of a session past its minute: the exact envelope and Retry-After. */
async function refused(t: any, res: Response, what: string): Promise<void> {
  t.equal(res.status, 429, `${what}: 429`);
  const body = await res.json() as any;
  t.strictSame(Object.keys(body).sort(), ['code', 'error', 'message', 'param', 'request_id', 'type'], `${what}: the envelope`);
  t.strictSame(body.error, { message: body.message, type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' });
  t.match(body.message, new RegExp(`more than ${PER_MINUTE} requests this minute \\(console\\.requests_per_minute\\); retry in \\d+ s\\.`));
  const retryAfter = Number(res.headers.get('retry-after'));
  t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `${what}: Retry-After ${retryAfter} s, within the minute`);
  t.ok(Number(res.headers.get('retry-after-ms')) > 0, `${what}: Retry-After-Ms`);
  t.equal(res.headers.get('set-cookie'), null);
}

t.test('an admin\'s session: the export spends a request a page; past the minute\'s 8, 429 on /admin and /console/api', async (t) => {
  // The day files are counted once on open: a report from the start of time waits for them all.
  t.equal((await bearer('/admin/usage?since=2000-01-01')).status, 200);
  const before = await metric(url, 'tollgate_usage_records_read_total');
  t.equal(before, RECORDS, 'the day files were counted on open, once');
  const admin = await tokenSignIn(url); // 1: GET /console/api/session
  const csv = await asSession(admin, '/console/api/usage/export?format=csv'); // 2, and 3 more pages: 5
  t.equal(csv.status, 200);
  const lines = (await csv.text()).trimEnd().split('\r\n');
  t.equal(lines.length, RECORDS + 1, 'every record, and the header');
  t.equal(new Set(lines.slice(1).map((l) => l.split(',')[1])).size, RECORDS, 'each once');
  t.equal(await metric(url, 'tollgate_usage_records_read_total') - before, RECORDS, 'page by page, each record read once');
  for (let i = 6; i <= PER_MINUTE; i++) t.equal((await asSession(admin, '/console/api/session')).status, 200, `request ${i} of ${PER_MINUTE}`);
  await refused(t, await asSession(admin, '/admin/usage/records?limit=5'), 'the console\'s read through /admin');
  await refused(t, await asSession(admin, '/console/api/usage/export?format=jsonl'), 'an export');
  await refused(t, await asSession(admin, '/admin/usage/hourly'), 'the Overview');
  t.equal((await bearer('/admin/usage/records?limit=5')).status, 200, 'the admin token is no session: not counted');
  const out = await asSession(admin, '/console/api/logout', 'POST');
  t.equal(out.status, 204, 'signing out is never refused');
  t.equal((await asSession(admin, '/console/api/session')).status, 401, 'and the session is over');
});

t.test('a member\'s session counts the same, apart from any other session', async (t) => {
  const member = await ssoSignIn(rig, { sub: 'm1', email: 'm@acme.example', tenant: 'acme' }) as Signed; // 1
  t.equal(member.role, 'member');
  const other = await ssoSignIn(rig, { sub: 'm2', email: 'm2@acme.example', tenant: 'acme' }) as Signed;
  for (let i = 2; i <= PER_MINUTE; i++) {
    const res = await asSession(member, i % 2 === 0 ? '/admin/usage/records?account=acme&limit=10' : '/console/api/usage/export?format=jsonl&account=acme&since=2099-01-01T00:00:00Z');
    t.equal(res.status, 200, `request ${i} of ${PER_MINUTE}`);
    await res.arrayBuffer();
  }
  await refused(t, await asSession(member, '/admin/usage/records?account=acme&limit=10'), 'the member\'s read');
  await refused(t, await asSession(member, '/console/api/usage/export?format=csv&account=acme'), 'the member\'s export');
  t.equal((await asSession(other, '/admin/usage/records?account=acme&limit=10')).status, 200, 'another session of the same account still reads');
});
