// `tollgate teams create|list|update|delete` and `keys create|update --team` as an operator runs
// them: the built bin as a child process against a real gateway. Exact stdout, stderr and exit
// code; --json prints the API's answer; the API's refusals are exit 1 with the code on stderr.

import t from 'tap';
import { execFile } from 'node:child_process';
import { BIN } from '../helpers/child.js';
import { baseConfig, startGateway, type TestGateway } from '../helpers/gateway.js';

const ADMIN = 'teams-cli-token-0123456789';

let gw: TestGateway;
t.before(async () => {
  const c = baseConfig();
  c.admin = { token: ADMIN };
  gw = await startGateway(c);
});
t.teardown(() => gw.close());

interface Run { code: number | null; stdout: string; stderr: string }

function cli(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args, '--url', gw.url], { env: { PATH: process.env.PATH, TOLLGATE_ADMIN_TOKEN: ADMIN }, timeout: 20_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : null, stdout, stderr });
    });
  });
}

async function api(method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${gw.url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  return res.status === 204 ? null : res.json();
}

t.test('teams create, list, update, delete; keys --team', async (t) => {
  await api('POST', '/admin/accounts', { id: 'tc', plan: 'free', wallet_units: 100 });
  const created = await cli(['teams', 'create', 'tc', 'search', '--name', 'Search', '--budget-units', '500', '--budget-period', 'month', '--rpm', '60', '--models', 'echo-*']);
  t.equal(created.code, 0, created.stderr);
  t.equal(created.stderr, '');
  const team = await api('GET', '/admin/teams/search');
  t.match(team, { id: 'search', account: 'tc', name: 'Search', budget: { units: 500, period: 'month', spent_units: 0 }, limits: { requests_per_minute: 60 }, models: ['echo-*'] });
  t.equal(created.stdout, [
    'created search  account=tc  "Search"',
    '  models: echo-*',
    `  budget: 0/500 per month (resets ${team.budget.resets_at})`,
    '  limits: rpm=60',
    `  created: ${team.created_at}`,
    '',
  ].join('\n'));

  const json = await cli(['teams', 'list', 'tc', '--json']);
  t.equal(json.code, 0);
  t.strictSame(JSON.parse(json.stdout), await api('GET', '/admin/accounts/tc/teams'), "--json prints the API's answer");
  t.match((await cli(['teams', 'list', 'tc'])).stdout, /^search {2}account=tc {2}"Search"\n/);

  const updated = await cli(['teams', 'update', 'search', '--rpm', 'null', '--max-concurrent', '4', '--json']);
  t.equal(updated.code, 0);
  t.match(JSON.parse(updated.stdout), { limits: { requests_per_minute: null, max_concurrent: 4 } });

  const key = await cli(['keys', 'create', 'tc', '--team', 'search', '--json']);
  t.equal(key.code, 0, key.stderr);
  const { id } = JSON.parse(key.stdout);
  t.equal((await api('GET', `/admin/keys/${id}`)).team, 'search');
  t.match((await cli(['keys', 'list', 'tc'])).stdout, /\n {2}team: search\n/);

  const inUse = await cli(['teams', 'delete', 'search']);
  t.equal(inUse.code, 1);
  t.match(inUse.stderr, /^error 409 team_in_use: /);
  t.equal((await cli(['keys', 'update', id, '--team', 'null'])).code, 0);
  t.strictSame(await cli(['teams', 'delete', 'search']), { code: 0, stdout: 'deleted team search\n', stderr: '' });
  const gone = await cli(['teams', 'delete', 'search']);
  t.equal(gone.code, 1);
  t.match(gone.stderr, /^error 404 team_not_found: /);
  const noTeam = await cli(['keys', 'update', id, '--team', 'search']);
  t.equal(noTeam.code, 1);
  t.match(noTeam.stderr, /^error 404 team_not_found: /);
});

t.test('usage errors are exit 2 before anything is sent', async (t) => {
  for (const [args, message] of [
    [['teams', 'create', 'tc'], /^usage: tollgate teams create ACCOUNT TEAM_ID/],
    [['teams', 'update', 'x'], /^teams update: name at least one setting/],
    [['teams', 'create', 'tc', 'x', '--allow-ips', '10.0.0.0/8'], /^teams create: --allow-ips is a key's control, not a team's/],
    [['teams', 'create', 'tc', 'x', '--rpm', '0'], /^teams create: --rpm must be at least 1/],
    [['teams', 'frobnicate'], /^tollgate: unknown command 'teams frobnicate'/],
  ] as const) {
    const r = await cli([...args]);
    t.equal(r.code, 2, args.join(' '));
    t.match(r.stderr, message);
    t.equal(r.stdout, '');
  }
  t.strictSame((await api('GET', '/admin/accounts/tc/teams')).teams, [], 'nothing was made');
});
