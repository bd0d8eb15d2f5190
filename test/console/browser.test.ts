// The console in a real browser (Debian's chromium through playwright-core) against `tollgate
// serve --config FILE` (CONTRACT section 12): token sign-in (and a wrong token), every page, a
// key created in the console then used on /v1 with the openai SDK, rotate, revoke, top-up
// (resubmitted: credited once), the CSV download, hostile names shown as typed, SSO sign-in
// against a local OpenID provider as admin, viewer (refused a write) and member (only their
// account). Screenshots of each page at 1280x800 and 390x844 go to .tap/console-screenshots/.

import t from 'tap';
import fc from 'fast-check';
import { mkdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import type { Page } from 'playwright-core';
import { holds } from '../property/arbitraries.js';
import { haveChromium, launch } from '../helpers/browser.js';
import { ADMIN_TOKEN, startConsole } from '../helpers/console.js';

const SHOTS = fileURLToPath(new URL('../../.tap/console-screenshots/', import.meta.url));
const PAGES = ['Overview', 'Accounts', 'Keys', 'Usage', 'Upstreams', 'Config', 'Audit'];

if (haveChromium(t)) {
  await mkdir(SHOTS, { recursive: true });
  const rig = await startConsole(t);
  const { url } = rig;
  const admin = (path: string, init: RequestInit = {}) =>
    fetch(`${url}${path}`, { ...init, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' } });
  const balance = async (id: string) => ((await (await admin(`/admin/accounts/${id}`)).json()) as { balance_units: number }).balance_units;
  const ctx = await launch(t);
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
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
  /** The account picker: a list when the gateway has GET /admin/accounts, else an id to open. */
  const pick = async (p: Page, id: string) => {
    const field = p.getByLabel('Account', { exact: true });
    await field.waitFor();
    if (await field.evaluate((e: any) => e.tagName === 'SELECT')) await field.selectOption(id);
    else { await field.fill(id); await p.getByRole('button', { name: 'Open' }).click(); }
  };
  const go = async (p: Page, name: string) => {
    await p.getByRole('navigation', { name: 'Console' }).getByRole('link', { name, exact: true }).click();
    await p.getByRole('heading', { level: 1, name }).waitFor();
  };

  await t.test('a wrong token: the form says so, and nothing else is shown', async (t) => {
    await page.goto(`${url}/console/`);
    await page.getByLabel('Admin token', { exact: true }).fill('not-the-token');
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByText('Wrong admin token.').waitFor();
    t.equal(await page.getByRole('navigation').count(), 0, 'no navigation');
    t.ok(await page.getByRole('button', { name: 'Sign in with SSO' }).isVisible());
    await shoot(page, 'signin-wrong-token');
  });

  await t.test('token sign-in: the seven pages, named exactly', async (t) => {
    await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    const nav = page.getByRole('navigation', { name: 'Console' });
    await nav.waitFor();
    t.same(await nav.getByRole('link').allTextContents(), PAGES);
    const cookies = await ctx.cookies(url);
    const c = cookies.find((x) => x.name === 'tg_console')!;
    t.match(c, { httpOnly: true, sameSite: 'Strict', path: '/' });
  });

  let plaintext = '';
  await t.test('Keys: create a key in the console, copy it, use it on /v1 with the openai SDK', async (t) => {
    await go(page, 'Keys');
    await pick(page, 'acme');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByLabel('Name').fill('console key');
    await page.getByLabel('Models').fill('echo-small');
    await page.getByLabel('Budget units').fill('500000');
    await page.getByLabel('Budget period').selectOption('month');
    await page.getByLabel('Expires').fill('2099-12-31');
    await shoot(page, 'keys-create-form');
    await page.getByRole('button', { name: 'Create', exact: true }).click();
    const shown = page.getByTestId('new-key');
    await shown.waitFor();
    plaintext = (await shown.textContent())!;
    t.match(plaintext, /^tg_[A-Za-z0-9]{40}$/);
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByText('Copied.').waitFor();
    t.equal(await page.evaluate(() => (globalThis as any).navigator.clipboard.readText()), plaintext, 'the clipboard holds the key');
    await shoot(page, 'keys-new-key');
    const row = page.getByRole('row').filter({ hasText: 'console key' });
    await row.waitFor();
    t.match(await row.textContent(), /echo-small/);
    t.match(await row.textContent(), /0 of 500,000 \/ month/);
    t.match(await row.textContent(), /2099-12-31/);
    const openai = new OpenAI({ apiKey: plaintext, baseURL: `${url}/v1`, maxRetries: 0 });
    const answer = await openai.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'hello from the console' }] });
    t.ok(answer.choices[0]!.message.content, 'the key works on /v1');
    // The budget bar shows what that request spent, against the key's budget.
    await page.getByRole('button', { name: 'Done' }).click();
    await go(page, 'Overview');
    await go(page, 'Keys');
    await pick(page, 'acme');
    const bar = page.getByRole('row').filter({ hasText: 'console key' }).locator('meter');
    await bar.waitFor();
    const spent = Number(await bar.getAttribute('value'));
    t.equal(await bar.getAttribute('max'), '500000', 'the bar runs to the budget');
    t.ok(spent > 0 && spent === (answer.usage!.prompt_tokens + answer.usage!.completion_tokens), `the bar holds what the request spent (${spent} units)`);
    t.match(await bar.getAttribute('aria-label'), new RegExp(`^${spent} of 500,000 units spent this month$`));
    await shoot(page, 'keys');
  });

  await t.test('Keys: rotate shows a new key once (the old one stops), revoke asks to confirm', async (t) => {
    await page.getByRole('button', { name: 'Done' }).click().catch(() => undefined);
    await page.getByRole('button', { name: 'Rotate console key' }).click();
    const shown = page.getByTestId('new-key');
    await shown.waitFor();
    const rotated = (await shown.textContent())!;
    t.not(rotated, plaintext);
    const old = new OpenAI({ apiKey: plaintext, baseURL: `${url}/v1`, maxRetries: 0 });
    await t.rejects(old.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'x' }] }), { status: 401 } as any);
    const fresh = new OpenAI({ apiKey: rotated, baseURL: `${url}/v1`, maxRetries: 0 });
    t.ok((await fresh.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'x' }] })).id);
    await page.getByRole('button', { name: 'Revoke console key' }).click();
    await page.getByText('Revoke this key?').waitFor();
    await shoot(page, 'keys-revoke-confirm');
    t.ok((await fresh.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'still' }] })).id, 'nothing revoked before the confirmation');
    await page.getByRole('button', { name: 'Yes, revoke' }).click();
    await page.getByRole('row').filter({ hasText: 'console key' }).waitFor({ state: 'detached' });
    await t.rejects(fresh.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content: 'x' }] }), { status: 401 } as any);
  });

  await t.test('Accounts: top up; a resubmission of the same form credits once', async (t) => {
    await go(page, 'Accounts');
    // The list, or (a gateway without GET /admin/accounts) the id field: whichever comes once loaded.
    await page.getByRole('button', { name: 'Top up other-co' }).or(page.getByLabel('Account', { exact: true })).waitFor();
    if (await page.getByRole('button', { name: 'Top up other-co' }).count() === 0) await pick(page, 'other-co');
    const before = await balance('other-co');
    await page.getByRole('button', { name: 'Top up other-co' }).click();
    await page.getByLabel('Amount (units)').fill('1234');
    const submit = page.getByRole('region', { name: /Top up/ }).getByRole('button', { name: 'Top up', exact: true });
    await submit.click();
    await page.getByText('Credited.').waitFor();
    await submit.click();
    await page.getByText('Already applied: this top-up was credited once.').waitFor();
    t.equal(await balance('other-co'), before + 1234, 'credited exactly once');
    await page.getByRole('row').filter({ hasText: 'other-co' }).getByRole('cell', { name: (before + 1234).toLocaleString('en-US') }).first().waitFor();
    await shoot(page, 'accounts');
  });

  await t.test('Overview, Usage (CSV download), Upstreams, Config (check, Reload), Audit', async (t) => {
    // The Overview's data routes (GET /admin/usage/hourly, /admin/usage/top, /admin/alerts)
    // come from other features; until they are merged the page shows its empty state, and here
    // the test answers them in their contract's shapes to see the charts and lists drawn.
    await go(page, 'Overview');
    await page.getByText('No usage in the last 24 hours yet.').or(page.locator('.chart canvas').first()).waitFor();
    await shoot(page, 'overview-empty');
    const hostile = '<img src=x onerror="window.__pwned=1">';
    const start = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 23 * 3_600_000;
    const hours = Array.from({ length: 24 }, (_, i) => ({ hour: new Date(start + i * 3_600_000).toISOString(), requests: 10 + i, errors: i % 5, prompt_tokens: 100 * i, completion_tokens: 50 * i, units: 1000 + 37 * i }));
    await page.route('**/admin/usage/hourly?*', (r) => r.fulfill({ json: { hours } }));
    await page.route('**/admin/usage/top?*', (r) => r.fulfill({ json: { by: new URL(r.request().url()).searchParams.get('by'), rows: [{ id: hostile, requests: 7, units: 4200 }, { id: 'acme', requests: 3, units: 99 }] } }));
    await page.route('**/admin/alerts?*', (r) => r.fulfill({ json: { events: [{ id: 'al_1', type: 'budget.threshold', at: new Date().toISOString(), subject: { account: hostile, key_id: 'key_1' }, data: { threshold: 80 } }], next_cursor: null } }));
    await go(page, 'Accounts');
    await go(page, 'Overview');
    await page.locator('.chart canvas').first().waitFor();
    t.equal(await page.locator('.chart canvas').count(), 3, 'three charts drawn');
    t.ok(await page.getByText(`${hours.reduce((n, h) => n + h.requests, 0).toLocaleString('en-US')} in 24 h`).isVisible(), 'requests total');
    t.equal(await page.getByRole('cell', { name: hostile, exact: true }).count(), 3, 'a hostile id in each top list, as text');
    t.ok(await page.getByText(`${hostile} / key_1`).isVisible(), 'the alert\'s subject, as text');
    t.equal(await page.evaluate(() => (globalThis as any).__pwned), undefined);
    await shoot(page, 'overview');
    await page.unrouteAll();

    await go(page, 'Usage');
    await page.getByRole('cell', { name: 'echo-small' }).first().waitFor();
    t.ok(await page.getByRole('columnheader', { name: 'Request id' }).isVisible());
    await shoot(page, 'usage');
    const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('link', { name: 'Download CSV' }).click()]);
    t.equal(download.suggestedFilename(), 'usage.csv');
    const csv = await readFile((await download.path())!, 'utf8');
    t.match(csv, /^request_id,at,account,key_id,team,model,/);
    t.match(csv, /,acme,key_[0-9a-f]+,,echo-small,echo,[^,]*,\/v1\/chat\/completions,200,/);

    await go(page, 'Upstreams');
    await page.getByRole('heading', { name: /^echo/ }).waitFor();
    t.ok(await page.getByText('healthy', { exact: true }).first().isVisible());
    const first = await page.getByText(/last \d\d:\d\d:\d\d UTC/).textContent();
    await page.waitForFunction((f) => !(globalThis as any).document.body.textContent.includes(f!), first, { timeout: 8000 });
    const next = await page.getByText(/last \d\d:\d\d:\d\d UTC/).textContent();
    t.not(next, first, `the page refreshed by itself (every 4 s; waited up to 8 s): ${first} -> ${next}`);
    await shoot(page, 'upstreams');

    await go(page, 'Config');
    const effective = page.getByLabel('Effective config (YAML)');
    await effective.waitFor();
    const yaml = await effective.textContent();
    t.notOk(yaml!.includes(ADMIN_TOKEN));
    t.match(yaml, /token: "\*\*\*"/);
    await page.getByLabel('YAML to check').fill('server:\n  port: nope\nbogus: 1\n');
    await page.getByRole('button', { name: 'Check' }).click();
    await page.getByRole('list', { name: 'Problems' }).getByText('bogus: unknown key').waitFor();
    await page.getByRole('button', { name: 'Reload' }).click();
    await page.getByText('Reloaded.').waitFor();
    await shoot(page, 'config');

    await go(page, 'Audit');
    await page.getByRole('cell', { name: 'POST /admin/accounts/{id}/credits' }).first().waitFor();
    t.ok(await page.getByRole('cell', { name: 'DELETE /admin/keys/{id}' }).first().isVisible());
    t.ok(await page.getByRole('cell', { name: 'POST /console/api/reload' }).first().isVisible());
    await shoot(page, 'audit');
  });

  await t.test('hostile key names and model patterns are shown as typed, never as markup', async (t) => {
    const fixed = ['<img src=x onerror="window.__pwned=1">', '<script>window.__pwned=1</script>', '"><svg onload=window.__pwned=1>', '&lt;b&gt;x', '<b>bold</b>'];
    const created: string[] = [];
    await holds(t, 'hostile names render as text', fc.asyncProperty(
      fc.oneof(fc.constantFrom(...fixed), fc.stringMatching(/^[<>"'&=/a-z ]{1,40}$/), fc.string({ minLength: 1, maxLength: 40 }).map((s) => `<i>${s}</i>`)),
      async (name) => {
        const res = await admin('/admin/accounts/other-co/keys', { method: 'POST', body: JSON.stringify({ name, models: [`${name.slice(0, 20)}*`], metadata: { note: name } }) });
        if (res.status !== 201) {
          const why = await res.text();
          // Names the API refuses (too long, control characters) never reach the page.
          if (res.status === 400) return;
          throw new Error(`create: ${res.status} ${why}`);
        }
        created.push(name);
      }), 25);
    await go(page, 'Keys');
    await pick(page, 'other-co');
    await page.getByRole('row').nth(1).waitFor();
    const shown = await page.locator('td.name').allTextContents();
    for (const name of new Set(created)) t.ok(shown.includes(name), `shown as typed: ${JSON.stringify(name)}`);
    const tags = await page.locator('main table').evaluate((el: any) => [...el.querySelectorAll('tbody *')].map((e: any) => String(e.tagName).toLowerCase()));
    t.same([...new Set(tags)].filter((x) => !['tr', 'td', 'span', 'button', 'meter'].includes(x)), [], 'no element came from the data');
    t.equal(await page.evaluate(() => (globalThis as any).__pwned), undefined, 'no script ran');
    await shoot(page, 'keys-hostile-names');
  });

  await t.test('sign out ends the session on the server', async (t) => {
    const cookie = (await ctx.cookies(url)).find((c) => c.name === 'tg_console')!;
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Admin token', { exact: true }).waitFor();
    const replay = await fetch(`${url}/admin/accounts/acme`, { headers: { cookie: `tg_console=${cookie.value}` } });
    t.equal(replay.status, 401);
  });

  await t.test('SSO as admin, as viewer (refused a write), as a member (only their account), and a refused user', async (t) => {
    const sso = async (user: Record<string, unknown>) => {
      rig.op.user = user;
      const ctx2 = await launch(t);
      const p = await ctx2.newPage();
      await p.goto(`${url}/console/`);
      await p.getByRole('button', { name: 'Sign in with SSO' }).click();
      return p;
    };
    const a = await sso({ sub: 'alice', email: 'alice@example.com', roles: ['tg-admin'] });
    await a.getByRole('navigation', { name: 'Console' }).waitFor();
    t.match(await a.locator('.who').textContent(), /sso:alice@example\.com/);
    t.same(await a.getByRole('navigation', { name: 'Console' }).getByRole('link').allTextContents(), PAGES);
    await shoot(a, 'sso-admin-overview');

    const v = await sso({ sub: 'victor', email: 'victor@example.com', roles: ['tg-viewer'] });
    await v.getByRole('navigation', { name: 'Console' }).waitFor();
    await go(v, 'Accounts');
    await v.getByRole('cell', { name: 'acme', exact: true }).or(v.getByLabel('Account', { exact: true })).waitFor();
    if (await v.getByRole('cell', { name: 'acme', exact: true }).count() === 0) await pick(v, 'acme');
    await v.getByRole('cell', { name: 'acme', exact: true }).waitFor();
    t.equal(await v.getByRole('button', { name: /^Top up/ }).count(), 0, 'no Top up for a viewer');
    const before = await balance('acme');
    const refused = await v.evaluate(async () => {
      const s = await (await fetch('/console/api/session')).json() as { csrf: string };
      const r = await fetch('/admin/accounts/acme/credits', { method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': s.csrf }, body: JSON.stringify({ units: 1, idempotency_key: 'viewer-try' }) });
      return { status: r.status, body: await r.json() as any };
    });
    t.equal(refused.status, 403);
    t.match(refused.body.error, { type: 'permission_error', param: null, code: 'forbidden' });
    t.equal(await balance('acme'), before);
    await shoot(v, 'viewer-accounts');

    const m = await sso({ sub: 'mia', email: 'mia@other.example', tenant: 'other-co' });
    const nav = m.getByRole('navigation', { name: 'Console' });
    await nav.waitFor();
    t.same(await nav.getByRole('link').allTextContents(), ['Overview', 'Keys', 'Usage']);
    await go(m, 'Keys');
    await m.getByText('Account other-co').waitFor();
    await m.getByRole('row').nth(1).waitFor();
    const accounts = await m.evaluate(async () => {
      const r = await fetch('/admin/accounts/acme/keys');
      return r.status;
    });
    t.equal(accounts, 403, 'another account\'s keys are refused');
    await go(m, 'Usage');
    t.equal(await m.getByLabel('Account').inputValue(), 'other-co');
    t.ok(await m.getByLabel('Account').isDisabled());
    await shoot(m, 'member-usage');

    const r = await sso({ sub: 'rex', email: 'rex@example.com', roles: ['nothing'] });
    await r.getByText('Your SSO account has no console role and names no account.').waitFor();
    t.equal(await r.getByRole('navigation').count(), 0);
  });

  t.test('the page ran without script errors', async (t) => {
    // 401 (the session asked before sign-in), 403 (the refusals tested), 404/405 (routes other features add): expected answers, not script errors.
    t.same(errors.filter((e) => !/status of 40[1345]/.test(e)), []);
  });

  t.test('the bundle is under 200 KB gzipped', async (t) => {
    const res = await fetch(`${url}/console/assets/console.js`, { headers: { 'accept-encoding': 'gzip' } });
    t.equal(res.headers.get('content-encoding'), 'gzip');
    const { gzipSync } = await import('node:zlib');
    const raw = await (await fetch(`${url}/console/assets/console.js`, { headers: { 'accept-encoding': 'identity' } })).arrayBuffer();
    const size = gzipSync(Buffer.from(raw)).length;
    t.ok(size < 200 * 1024, `${size} bytes gzipped`);
    const { readdir } = await import('node:fs/promises');
    const ui = fileURLToPath(new URL('../../lib/console/ui/', import.meta.url));
    for (const f of await readdir(ui)) {
      const text = await readFile(`${ui}${f}`, 'utf8');
      t.notOk(/dangerouslySetInnerHTML|innerHTML|outerHTML|insertAdjacentHTML|document\.write/.test(text), `${f} never writes markup`);
    }
  });
}
