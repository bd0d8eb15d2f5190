// Teams and alerts in the console, against the integrated gateway (`tollgate serve --config
// FILE` with the console, alerts.wallet_low_units and a webhook to a local receiver): teams made
// through the admin API shown per account with their budgets (Accounts and Keys), each key's
// team, the Create key form's Team choice (the created key carries it, and spends from the
// team's budget through the openai SDK), a real wallet.low alert on the Overview with its
// delivery state, hostile team names shown as text; and over plain HTTP with console sessions:
// a member sees only their account's teams, viewers and members are refused team writes (403,
// nothing changed), and the admin's team writes are in GET /admin/audit. Screenshots at
// 1280x800 and 390x844 go to .tap/console-screenshots/ (teams-*, overview-alerts-*).

import t from 'tap';
import fc from 'fast-check';
import { createServer, type IncomingMessage } from 'node:http';
import { createHmac } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import type { Page } from 'playwright-core';
import { holds } from '../property/arbitraries.js';
import { haveChromium, launch } from '../helpers/browser.js';
import { ADMIN_TOKEN, WALLET, ssoSignIn, startConsole, tokenSignIn, withSession, type Signed } from '../helpers/console.js';

const SHOTS = fileURLToPath(new URL('../../.tap/console-screenshots/', import.meta.url));
const SECRET = 'console-alerts-secret';
// Small, so a few short requests take the team past its 50% threshold.
const TEAM_UNITS = 60;
const HOSTILE = ['<img src=x onerror="window.__pwned=1">', '<script>window.__pwned=1</script>', '"><svg onload=window.__pwned=1>', '&lt;b&gt;x'];

if (haveChromium(t)) {
  await mkdir(SHOTS, { recursive: true });
  // The webhook receiver: every delivery, its signature checked.
  const received: Array<{ body: any; signed: boolean }> = [];
  const hook = createServer((req: IncomingMessage, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks);
      const want = `sha256=${createHmac('sha256', SECRET).update(raw).digest('hex')}`;
      received.push({ body: JSON.parse(raw.toString('utf8')), signed: req.headers['x-tollgate-signature'] === want });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => hook.close(() => r())));
  const hookUrl = `http://127.0.0.1:${(hook.address() as { port: number }).port}/hook`;

  // Below the wallet by a little: the first settled request of acme takes it under.
  const rig = await startConsole(t, { alerts: { wallet_low_units: WALLET - 5, webhooks: [{ url: hookUrl, secret: SECRET, events: ['wallet.low', 'budget.threshold'] }] } });
  const { url } = rig;
  const admin = (path: string, method = 'GET', body?: unknown) => fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const asSession = (s: Signed, path: string, method = 'GET', body?: unknown) => fetch(`${url}${path}`, {
    method, headers: { ...withSession(s, method), 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  // Set-up before the subtests asserts nothing (tap would end the file's test at the first idle moment): it throws.
  const made = async (r: Promise<Response>) => { const res = await r; if (res.status !== 201) throw new Error(`team create: ${res.status} ${await res.text()}`); };
  const teamsOf = async (account: string) => ((await (await admin(`/admin/accounts/${account}/teams`)).json()) as { teams: any[] }).teams;

  for (const team of [
    { id: 'search', name: 'Search', budget: { units: TEAM_UNITS, period: 'month' }, models: ['echo-small'] },
    { id: 'ops', name: 'Operations' },
  ]) {
    await made(admin('/admin/accounts/acme/teams', 'POST', team));
  }
  await made(admin('/admin/accounts/other-co/teams', 'POST', { id: 'other-team', name: 'Other', budget: { units: 5000, period: 'day' } }));

  const ctx = await launch(t);
  const page = await ctx.newPage();
  page.setDefaultTimeout(15_000);
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  const shoot = async (p: Page, name: string) => {
    for (const [w, h] of [[1280, 800], [390, 844]] as const) {
      await p.setViewportSize({ width: w, height: h });
      await p.waitForTimeout(150);
      await p.screenshot({ path: `${SHOTS}${name}-${w}.png`, fullPage: true });
    }
    await p.setViewportSize({ width: 1280, height: 800 });
  };
  const go = async (p: Page, name: string) => {
    await p.getByRole('navigation', { name: 'Console' }).getByRole('link', { name, exact: true }).click();
    await p.getByRole('heading', { level: 1, name }).waitFor();
  };

  await page.goto(`${url}/console/`);
  await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
  await page.getByRole('button', { name: 'Sign in', exact: true }).click();
  await page.getByRole('navigation', { name: 'Console' }).waitFor();

  let teamKey = '';
  await t.test('Keys: the account\'s teams, a key created in the console with a team, which spends from the team', async (t) => {
    await go(page, 'Keys');
    await page.getByLabel('Account', { exact: true }).selectOption('acme');
    const teams = page.getByRole('table', { name: 'Teams of acme' });
    await teams.waitFor();
    const search = teams.getByRole('row').filter({ hasText: 'search' });
    t.match(await search.textContent(), /Search/);
    t.match(await search.textContent(), /^search.*Search.*0 of 60 \/ month/);
    t.match(await teams.getByRole('row').filter({ hasText: 'ops' }).textContent(), /0 \(no budget\)/);
    await page.getByRole('button', { name: 'Create key' }).click();
    const choice = page.getByLabel('Team', { exact: true });
    t.same(await choice.locator('option').allTextContents(), ['No team', 'Search (search)', 'Operations (ops)'], 'the account\'s teams, optional');
    await page.getByLabel('Name').fill('team key');
    await choice.selectOption('search');
    await shoot(page, 'teams-keys-create-form');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    teamKey = (await page.getByTestId('new-key').textContent())!;
    const row = page.getByRole('row').filter({ hasText: 'team key' });
    await row.waitFor();
    t.match(await row.textContent(), /Search \(search\)/, 'the key\'s team in the table');
    const keys = (await (await admin('/admin/accounts/acme/keys')).json()) as { keys: Array<{ name: string; team: string | null }> };
    t.equal(keys.keys.find((k) => k.name === 'team key')?.team, 'search', 'the created key carries the team');

    // A key without a team: created with "No team".
    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByLabel('Name').fill('no team key');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    await page.getByTestId('new-key').waitFor();
    const after = (await (await admin('/admin/accounts/acme/keys')).json()) as { keys: Array<{ name: string; team: string | null }> };
    t.equal(after.keys.find((k) => k.name === 'no team key')?.team, null);

    const openai = new OpenAI({ apiKey: teamKey, baseURL: `${url}/v1`, maxRetries: 0 });
    await openai.chat.completions.create({ model: 'echo-small', max_tokens: 8, messages: [{ role: 'user', content: 'spend from the team' }] });
    const spent = (await teamsOf('acme')).find((x) => x.id === 'search').budget.spent_units as number;
    t.ok(spent > 0, `the team spent ${spent}`);
    await page.getByRole('button', { name: 'Done' }).click();
    await go(page, 'Usage');
    await go(page, 'Keys');
    await page.getByLabel('Account', { exact: true }).selectOption('acme');
    await page.getByRole('table', { name: 'Teams of acme' }).getByRole('row').filter({ hasText: `${spent} of ${TEAM_UNITS} / month` }).waitFor();
    t.pass('the team\'s spend shown');
    await shoot(page, 'teams-keys');
  });

  await t.test('Accounts: each account\'s teams with budget spent and units', async (t) => {
    await go(page, 'Accounts');
    await page.getByRole('button', { name: 'Teams of other-co' }).click();
    const other = page.getByRole('table', { name: 'Teams of other-co' });
    t.match(await other.getByRole('row').filter({ hasText: 'other-team' }).textContent(), /0 of 5,000 \/ day/);
    await page.getByRole('button', { name: 'Teams of acme' }).click();
    const acme = page.getByRole('table', { name: 'Teams of acme' });
    await acme.getByRole('row').filter({ hasText: 'ops' }).waitFor();
    t.equal(await page.getByRole('table', { name: 'Teams of other-co' }).count(), 0, 'one account\'s teams at a time');
    await shoot(page, 'teams-accounts');
  });

  await t.test('Overview: wallet.low and the team\'s budget.threshold from real requests, with their delivery state', async (t) => {
    // teamKey's request above already took acme below the mark; more of them take the team past 50%.
    const openai = new OpenAI({ apiKey: teamKey, baseURL: `${url}/v1`, maxRetries: 0 });
    for (let i = 0; i < 10; i++) {
      const spent = (await teamsOf('acme')).find((x) => x.id === 'search').budget.spent_units as number;
      if (spent * 100 >= TEAM_UNITS * 50) break;
      await openai.chat.completions.create({ model: 'echo-small', max_tokens: 8, messages: [{ role: 'user', content: `more ${i}` }] });
    }
    const deadline = Date.now() + 20_000;
    let events: any[] = [];
    const delivered = (type: string) => events.some((e) => e.type === type && e.delivery.state === 'delivered');
    while (Date.now() < deadline) {
      events = ((await (await admin('/admin/alerts?limit=10')).json()) as { events: any[] }).events;
      if (delivered('wallet.low') && delivered('budget.threshold')) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    const crossed = events.find((e) => e.type === 'budget.threshold' && e.data.threshold === 50);
    t.match(crossed, { subject: { account: 'acme', team: 'search' }, data: { scope: 'team', budget_units: TEAM_UNITS, period: 'month' }, delivery: { state: 'delivered' } });
    const low = events.find((e) => e.type === 'wallet.low');
    t.match(low, { type: 'wallet.low', subject: { account: 'acme' }, data: { wallet_low_units: WALLET - 5 }, delivery: { state: 'delivered', attempts: 1, last_status: 204 } });
    t.ok(received.some((r) => r.signed && r.body.id === low.id), 'the receiver got it, signed');
    await go(page, 'Usage');
    await go(page, 'Overview');
    const table = page.getByRole('table', { name: 'Alerts, newest first' });
    const row = table.getByRole('row').filter({ hasText: 'wallet.low' });
    await row.waitFor();
    const text = (await row.textContent())!;
    t.match(text, /acme/);
    t.match(text, new RegExp(`available ${(low.data.available_units as number).toLocaleString('en-US')} units, below ${(WALLET - 5).toLocaleString('en-US')}`));
    t.match(text, /delivered \(1 attempt, last HTTP 204\)/);
    t.match(text, new RegExp(low.at.slice(0, 16).replace('T', ' ')), 'the time');
    const team = table.getByRole('row').filter({ hasText: 'team search' }).filter({ hasText: '50%' });
    t.match(await team.textContent(), new RegExp(`acme / team search / ${crossed.subject.key_id}.*50% of the team's budget \\(\\d+ of ${TEAM_UNITS} units / month\\)`));
    await shoot(page, 'overview-alerts');
  });

  await t.test('hostile team names are shown as typed on the Keys and Accounts pages', async (t) => {
    let n = 0;
    const made: string[] = [];
    await holds(t, 'hostile team names render as text', fc.asyncProperty(
      fc.oneof(fc.constantFrom(...HOSTILE), fc.stringMatching(/^[<>"'&=/a-z ]{1,40}$/), fc.string({ minLength: 1, maxLength: 30 }).map((s) => `<i>${s}</i>`)),
      async (name) => {
        const res = await admin('/admin/accounts/other-co/teams', 'POST', { id: `hostile-${n++}`, name, budget: { units: 1000, period: 'month' } });
        if (res.status === 400) return; // names the API refuses never reach the page
        if (res.status !== 201) throw new Error(`create: ${res.status} ${await res.text()}`);
        made.push(name);
      }), 15);
    await go(page, 'Keys');
    await page.getByLabel('Account', { exact: true }).selectOption('other-co');
    const table = page.getByRole('table', { name: 'Teams of other-co' });
    await table.getByRole('row').filter({ hasText: 'hostile-0' }).waitFor();
    const shown = await table.locator('td.name').allTextContents();
    for (const name of new Set(made)) t.ok(shown.includes(name), `shown as typed: ${JSON.stringify(name)}`);
    await page.getByRole('button', { name: 'Create key' }).click();
    const options = await page.getByLabel('Team', { exact: true }).locator('option').allTextContents();
    for (const name of new Set(made)) t.ok(options.some((o) => o.startsWith(name)), `offered as typed: ${JSON.stringify(name)}`);
    const tags = await page.locator('main').evaluate((el: any) => [...el.querySelectorAll('tbody *, select *')].map((e: any) => String(e.tagName).toLowerCase()));
    t.same([...new Set(tags)].filter((x) => !['tr', 'td', 'span', 'button', 'option', 'meter'].includes(x)), [], 'no element came from the data');
    await shoot(page, 'teams-hostile-names');
    await go(page, 'Accounts');
    await page.getByRole('button', { name: 'Teams of other-co' }).click();
    await page.getByRole('table', { name: 'Teams of other-co' }).getByRole('row').filter({ hasText: 'hostile-0' }).waitFor();
    t.equal(await page.evaluate(() => (globalThis as any).__pwned), undefined, 'no script ran');
  });

  await t.test('a member sees only their account\'s teams, in the browser and over HTTP', async (t) => {
    rig.op.user = { sub: 'mia', email: 'mia@other.example', tenant: 'other-co' };
    const ctx2 = await launch(t);
    const m = await ctx2.newPage();
    m.setDefaultTimeout(15_000);
    await m.goto(`${url}/console/`);
    await m.getByRole('button', { name: 'Sign in with SSO' }).click();
    await go(m, 'Keys');
    const teams = m.getByRole('table', { name: 'Teams of other-co' });
    await teams.getByRole('row').filter({ hasText: 'other-team' }).waitFor();
    t.equal(await m.getByText('search', { exact: true }).count(), 0, 'no team of acme');
    await shoot(m, 'teams-member-keys');
    const status = await m.evaluate(async () => (await fetch('/admin/accounts/acme/teams')).status);
    t.equal(status, 403, 'another account\'s teams are refused');
  });

  t.test('the pages ran without script errors', async (t) => {
    t.same(errors.filter((e) => !/status of 40[1345]/.test(e)), []);
  });

  await t.test('team writes: 403 for a viewer and a member through the console session (nothing changed); the admin\'s are audited', async (t) => {
    const viewer = await ssoSignIn(rig, { sub: 'victor', email: 'victor@example.com', roles: ['tg-viewer'] }) as Signed;
    const member = await ssoSignIn(rig, { sub: 'mia', email: 'mia@other.example', tenant: 'other-co' }) as Signed;
    t.equal(viewer.role, 'viewer');
    t.equal(member.role, 'member');
    const before = { acme: await teamsOf('acme'), other: await teamsOf('other-co') };
    for (const [who, s] of [['viewer', viewer], ['member', member]] as const) {
      for (const [method, path, body] of [
        ['POST', '/admin/accounts/other-co/teams', { id: `by-${who}`, name: 'x' }],
        ['POST', '/admin/accounts/acme/teams', { id: `by-${who}-2`, name: 'x' }],
        ['PATCH', '/admin/teams/other-team', { name: 'renamed' }],
        ['PATCH', '/admin/teams/search', { budget: { units: 1, period: 'day' } }],
        ['DELETE', '/admin/teams/ops', undefined],
        ['DELETE', '/admin/teams/other-team', undefined],
      ] as const) {
        const res = await asSession(s, path, method, body);
        t.equal(res.status, 403, `${who}: ${method} ${path}`);
        t.match(await res.json(), { error: { type: 'permission_error', param: null, code: 'forbidden' } });
      }
    }
    t.same({ acme: await teamsOf('acme'), other: await teamsOf('other-co') }, before, 'no team changed');
    // The member reads their own account's teams, and not another's.
    t.equal((await asSession(member, '/admin/accounts/other-co/teams')).status, 200);
    t.equal((await asSession(member, '/admin/accounts/acme/teams')).status, 403);

    const me = await tokenSignIn(url);
    t.equal((await asSession(me, '/admin/accounts/acme/teams', 'POST', { id: 'audited', name: 'Audited' })).status, 201);
    t.equal((await asSession(me, '/admin/teams/audited', 'PATCH', { name: 'Audited 2' })).status, 200);
    t.equal((await asSession(me, '/admin/teams/audited', 'DELETE')).status, 204);
    const audit = ((await (await admin('/admin/audit?limit=200')).json()) as { events: Array<{ actor: string; action: string; target: string }> }).events;
    const mine = audit.filter((e) => e.target === 'audited').map((e) => e.action);
    t.same(mine.sort(), ['DELETE /admin/teams/{id}', 'PATCH /admin/teams/{id}'].sort(), 'PATCH and DELETE audited with the team as target');
    t.ok(audit.some((e) => e.action === 'POST /admin/accounts/{id}/teams' && e.target === 'acme'), 'the create audited with the account as target');
    t.notOk(audit.some((e) => /by-(viewer|member)/.test(e.target) || ((e.target === 'other-team' || e.target === 'ops') && e.action !== 'POST /admin/accounts/{id}/teams')), 'no refused write audited');
  });
}
