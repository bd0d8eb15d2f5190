// The console's Usage page groups and filters by tag and end user (CONTRACT section 20) in a
// real browser (Debian's chromium through playwright-core) against `tollgate serve --config`:
// requests tagged through /v1, then Usage grouped by tag (each tag's units as the admin API
// says, a hostile end user shown as typed), a group's units opening its records, and the tag
// filter narrowing the records. Screenshots go to .tap/console-screenshots/.

import t from 'tap';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { haveChromium, launch } from '../helpers/browser.js';
import { ADMIN_TOKEN, startConsole } from '../helpers/console.js';

const SHOTS = fileURLToPath(new URL('../../.tap/console-screenshots/', import.meta.url));

if (haveChromium(t)) {
  await mkdir(SHOTS, { recursive: true });
  const rig = await startConsole(t);
  const { url } = rig;
  const admin = async (path: string) => (await fetch(`${url}${path}`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json() as Promise<any>;
  const key = (await (await fetch(`${url}/admin/accounts/acme/keys`, { method: 'POST', headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).json() as any).key;
  const hostile = '<img src=x onerror="window.__pwned=1">';
  const chat = async (tags: string, user: string) => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-tollgate-tags': tags },
      body: JSON.stringify({ model: 'echo-small', user, messages: [{ role: 'user', content: 'hello there' }] }),
    });
    if (res.status !== 200) throw new Error(`chat: ${res.status} ${await res.text()}`);
    await res.text();
  };
  await chat('search,beta', 'alice');
  await chat('search', hostile);
  await chat('billing', 'alice');
  // Records land as answers close.
  for (let i = 0; i < 50 && (await admin('/admin/usage?account=acme&group_by=tag')).totals.requests < 3; i++) await new Promise((r) => setTimeout(r, 50));
  const expected = (await admin('/admin/usage?account=acme&group_by=tag')).groups;

  const ctx = await launch(t);
  const page = await ctx.newPage();
  page.setDefaultTimeout(15_000);
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  const shoot = async (p: Page, name: string) => {
    for (const [w, h] of [[1280, 800], [390, 844]] as const) {
      await p.setViewportSize({ width: w, height: h });
      await p.waitForTimeout(150);
      await p.screenshot({ path: `${SHOTS}${name}-${w}.png`, fullPage: true });
    }
    await p.setViewportSize({ width: 1280, height: 800 });
  };

  await t.test('Usage grouped by tag and by end user, a group opening its records, the tag filter', async (t) => {
    await page.goto(`${url}/console/`);
    await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Usage', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Usage' }).waitFor();

    await page.getByLabel('Account', { exact: true }).fill('acme');
    await page.getByLabel('Group by').selectOption('tag');
    await page.getByRole('button', { name: 'Apply' }).click();
    const table = page.getByTestId('usage-groups');
    await table.waitFor();
    for (const g of expected) {
      const row = table.getByRole('row').filter({ has: page.getByRole('cell', { name: g.tag, exact: true }) });
      t.equal(await row.getByRole('button').textContent(), g.units.toLocaleString('en-US'), `tag ${g.tag}: ${g.units} units`);
    }
    t.match(await page.getByTestId('group-totals').textContent(), /3 requests/);
    await page.getByTestId('group-chart').locator('canvas').first().waitFor();
    t.match(await page.getByTestId('group-chart').locator('figcaption').textContent(), /search: 20/, 'the top groups per day, drawn and as text');
    await shoot(page, 'usage-by-tag');

    // A group's units open its records: the two records tagged search.
    await table.getByRole('row').filter({ has: page.getByRole('cell', { name: 'search', exact: true }) }).getByRole('button').click();
    await page.getByRole('columnheader', { name: 'Request id' }).waitFor();
    t.equal(await page.getByLabel('Tag', { exact: true }).inputValue(), 'search');
    t.equal(await page.locator('tbody tr').count(), 2, "the group's records");
    t.equal(await page.getByRole('cell', { name: hostile, exact: true }).count(), 1, 'a hostile end user shown as text');

    await page.getByLabel('Group by').selectOption('end_user');
    await page.getByLabel('Tag', { exact: true }).fill('');
    await page.getByRole('button', { name: 'Apply' }).click();
    await table.waitFor();
    const alice = table.getByRole('row').filter({ has: page.getByRole('cell', { name: 'alice', exact: true }) });
    t.equal(await alice.getByRole('cell').nth(1).textContent(), '2', 'alice made two requests');
    t.equal(await table.getByRole('cell', { name: hostile, exact: true }).count(), 1);
    await shoot(page, 'usage-by-end-user');
    t.equal(await page.evaluate(() => (globalThis as any).__pwned), undefined, 'nothing ran');
    t.same(errors, [], 'no page errors');
  });
}
