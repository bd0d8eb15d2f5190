// Spend attribution's groups are exact (CONTRACT section 20): random requests, with random
// tags (x-tollgate-tags) and end users (x-tollgate-end-user or the body's user), over the
// chat, completions, Responses and Messages routes, sent at once to two gateway instances on
// one Redis; then GET /admin/usage grouped by end_user, key, model and day sums to the
// ungrouped totals to the unit, the totals equal what the answers said was charged, and each
// tag's group holds exactly the requests that carried it (a request with two tags counts in
// both; those with none form the group tag: null).

import t from 'tap';
import fc from 'fast-check';
import { startGateway, baseConfig, DEMO_KEY, type TestGateway } from '../helpers/gateway.js';
import { startRedis } from '../helpers/redis.js';
import { holds, runs } from './arbitraries.js';

const ADMIN = 'attribution-admin-token-0000';
const redis = await startRedis();
t.teardown(() => redis.stop());

const config = () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  c.plans.free.requests_per_minute = 100_000;
  c.store = { kind: 'redis', url: redis.url, prefix: 'tg-attrib-prop:' };
  return c;
};
const gws: TestGateway[] = [await startGateway(config()), await startGateway(config())];
t.teardown(() => Promise.all(gws.map((g) => g.close())));

const ROUTES = ['chat', 'completions', 'responses', 'messages'] as const;
const request = fc.record({
  gateway: fc.integer({ min: 0, max: 1 }),
  route: fc.constantFrom(...ROUTES),
  tags: fc.uniqueArray(fc.constantFrom('a', 'b', 'c:d', 'e.f', 'g-h'), { maxLength: 3 }),
  user: fc.option(fc.constantFrom('alice', 'bob', 'Carol Smith', 'ü@x'), { nil: null }),
  viaHeader: fc.boolean(),
  words: fc.integer({ min: 1, max: 6 }),
});
type Req = typeof request extends fc.Arbitrary<infer R> ? R : never;

/** Sends one request; the units its answer says were charged. */
async function send(r: Req, run: number): Promise<number> {
  const headers: Record<string, string> = { authorization: `Bearer ${DEMO_KEY}`, 'content-type': 'application/json' };
  // Tags of this run only, so each run's tag groups are its own.
  if (r.tags.length > 0) headers['x-tollgate-tags'] = r.tags.map((x) => `r${run}.${x}`).join(',');
  const user = r.user === null ? undefined : `${r.user}#${run}`;
  const body: Record<string, unknown> = {};
  if (user !== undefined && (r.viaHeader || r.route === 'messages')) headers['x-tollgate-end-user'] = user;
  else if (user !== undefined) body.user = user;
  const text = Array.from({ length: r.words }, (_, i) => `w${i}`).join(' ');
  let path: string;
  if (r.route === 'chat') { path = '/v1/chat/completions'; Object.assign(body, { model: 'echo-small', messages: [{ role: 'user', content: text }] }); }
  else if (r.route === 'completions') { path = '/v1/completions'; Object.assign(body, { model: 'echo-small', prompt: text, max_tokens: 16 }); }
  else if (r.route === 'responses') { path = '/v1/responses'; Object.assign(body, { model: 'echo-small', input: text, store: false }); }
  else { path = '/v1/messages'; Object.assign(body, { model: 'echo-small', max_tokens: 16, messages: [{ role: 'user', content: text }] }); }
  const res = await fetch(`${gws[r.gateway]!.url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
  await res.text();
  if (res.status !== 200) throw new Error(`${r.route}: ${res.status}`);
  return Number(res.headers.get('x-tollgate-units-charged') ?? 'NaN');
}

async function usage(query: string): Promise<any> {
  const res = await fetch(`${gws[0]!.url}/admin/usage?account=demo&since=2000-01-01&${query}`, { headers: { authorization: `Bearer ${ADMIN}` } });
  if (res.status !== 200) throw new Error(`${query}: ${res.status} ${await res.text()}`);
  return res.json();
}

const sumOf = (rows: any[]) => rows.reduce((a, g) => [a[0] + g.requests, a[1] + g.prompt_tokens, a[2] + g.completion_tokens, a[3] + g.units], [0, 0, 0, 0]);
const flat = (s: any) => [s.requests, s.prompt_tokens, s.completion_tokens, s.units];

let run = 0;
let sent = 0;
let charged = 0;
let untagged = 0;

t.test('grouped usage sums to the totals to the unit, over two instances on one Redis', async (t) => {
  await holds(t, 'attribution groups are exact', fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 12 }), async (reqs) => {
    run++;
    const units = await Promise.all(reqs.map((r) => send(r, run)));
    for (const u of units) if (!Number.isSafeInteger(u)) throw new Error('an answer without x-tollgate-units-charged');
    sent += reqs.length;
    charged += units.reduce((a, b) => a + b, 0);
    untagged += reqs.filter((r) => r.tags.length === 0).length;
    // Records are written as answers close: wait for every one.
    let plain: any;
    for (let i = 0; i < 100; i++) {
      plain = await usage('');
      if (plain.requests === sent) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    if (plain.requests !== sent || plain.units !== charged) throw new Error(`totals ${plain.requests}/${plain.units}, sent ${sent}/${charged}`);
    for (const by of ['end_user', 'key', 'model', 'day', 'end_user,model', 'day,end_user']) {
      const g = await usage(`group_by=${by}`);
      if (JSON.stringify(flat(g.totals)) !== JSON.stringify(flat(plain))) throw new Error(`${by}: totals ${JSON.stringify(g.totals)}`);
      if (JSON.stringify(sumOf(g.groups)) !== JSON.stringify(flat(plain))) throw new Error(`${by}: groups sum to ${sumOf(g.groups)}, totals ${flat(plain)}`);
    }
    const byTag = await usage('group_by=tag');
    const expected = new Map<string | null, [number, number]>();
    reqs.forEach((r, i) => {
      for (const tag of r.tags) {
        const k = `r${run}.${tag}`;
        const e = expected.get(k) ?? [0, 0];
        expected.set(k, [e[0] + 1, e[1] + units[i]!]);
      }
    });
    for (const [tag, [n, u]] of expected) {
      const g = byTag.groups.find((x: any) => x.tag === tag);
      if (g?.requests !== n || g?.units !== u) throw new Error(`tag ${tag}: ${JSON.stringify(g)}, wanted ${n} requests, ${u} units`);
    }
    const none = byTag.groups.find((x: any) => x.tag === null)?.requests ?? 0;
    if (none !== untagged) throw new Error(`tag null: ${none}, wanted ${untagged}`);
    // Each end user's group, filtered, equals its group.
    const users = await usage('group_by=end_user');
    for (const g of users.groups.filter((x: any) => x.end_user !== null && x.end_user.endsWith(`#${run}`))) {
      const one = await usage(`end_user=${encodeURIComponent(g.end_user)}`);
      if (JSON.stringify(flat(one.totals)) !== JSON.stringify(flat(g))) throw new Error(`end_user=${g.end_user}: ${JSON.stringify(one.totals)}`);
    }
  }), runs(8));
});
