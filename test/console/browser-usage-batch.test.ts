// The console's Usage page filtered by batch (CONTRACT sections 12 and 18) in a real browser
// (Debian's chromium through playwright-core) against `tollgate serve --config`: a batch of
// three lines run beside two live requests; the admin API's records filtered by batch_id hold
// exactly the batch's lines; on the page the "Batch id" filter shows those records only, each
// with its custom_id, and a grouping asked for with a batch filter says it shows the
// records. Screenshots go to .tap/console-screenshots/.

import t from 'tap';
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { haveChromium, launch } from '../helpers/browser.js';
import { ADMIN_TOKEN, startConsole, tokenSignIn, withSession } from '../helpers/console.js';

const SHOTS = fileURLToPath(new URL('../../.tap/console-screenshots/', import.meta.url));

if (haveChromium(t)) {
  await mkdir(SHOTS, { recursive: true });
  const { url } = await startConsole(t);
  const auth = { authorization: `Bearer ${ADMIN_TOKEN}` };
  const admin = async (path: string) => (await fetch(`${url}${path}`, { headers: auth })).json() as Promise<any>;
  const key = (await (await fetch(`${url}/admin/accounts/acme/keys`, { method: 'POST', headers: auth })).json() as any).key;
  const v1 = (path: string, init: RequestInit) => fetch(`${url}/v1${path}`, { ...init, headers: { authorization: `Bearer ${key}`, ...init.headers } });
  const chat = { model: 'echo-small', messages: [{ role: 'user', content: 'hello there' }] };
  for (let i = 0; i < 2; i++) await (await v1('/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat) })).text();
  const jsonl = ['a', 'b', 'c'].map((id) => JSON.stringify({ custom_id: `doc-${id}`, method: 'POST', url: '/v1/chat/completions', body: chat })).join('\n');
  const form = new FormData();
  form.set('purpose', 'batch');
  form.set('file', new Blob([jsonl]), 'docs.jsonl');
  const file = await (await v1('/files', { method: 'POST', body: form })).json() as any;
  const made = await (await v1('/batches', {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ input_file_id: file.id, endpoint: '/v1/chat/completions', completion_window: '24h' }),
  })).json() as any;
  let status = '';
  for (let i = 0; i < 400 && status !== 'completed'; i++) {
    status = (await (await v1(`/batches/${made.id}`, { method: 'GET' })).json() as any).status;
    if (status !== 'completed') await new Promise((r) => setTimeout(r, 50));
  }

  t.test('the admin API filters records by batch_id', async (t) => {
    t.equal(status, 'completed');
    const all = await admin('/admin/usage/records?account=acme');
    t.equal(all.records.length, 5, 'two live requests and three batch lines');
    const mine = await admin(`/admin/usage/records?account=acme&batch_id=${made.id}`);
    t.same(mine.records.map((r: any) => [r.batch_id, r.custom_id]).sort(), [[made.id, 'doc-a'], [made.id, 'doc-b'], [made.id, 'doc-c']]);
    t.same((await admin('/admin/usage/records?batch_id=batch_none')).records, [], 'another batch id: none');
    const empty = await fetch(`${url}/admin/usage/records?batch_id=`, { headers: auth });
    t.same([empty.status, ((await empty.json()) as any).error.param], [400, 'batch_id'], 'an empty batch_id is refused as the other filters are');
    const signed = await tokenSignIn(url);
    const jsonl = await (await fetch(`${url}/console/api/usage/export?format=jsonl&batch_id=${made.id}`, { headers: withSession(signed, 'GET') })).text();
    t.same(jsonl.trim().split('\n').map((l) => JSON.parse(l).custom_id).sort(), ['doc-a', 'doc-b', 'doc-c'], "the export downloads the batch's records");
  });

  t.test('Usage filtered by batch in the browser', async (t) => {
    const ctx = await launch(t);
    const page = await ctx.newPage();
    page.setDefaultTimeout(15_000);
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${url}/console/`);
    await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Usage', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Usage' }).waitFor();
    await page.getByRole('columnheader', { name: 'Request id' }).waitFor();
    await page.locator('tbody tr').nth(4).waitFor();
    t.equal(await page.locator('tbody tr').count(), 5, 'unfiltered: every record');

    await page.getByLabel('Batch id', { exact: true }).fill(made.id);
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForFunction('document.querySelectorAll("tbody tr").length === 3');
    const cells = await page.locator('tbody tr td:nth-child(9)').allTextContents();
    t.same(cells.sort(), ['doc-a', 'doc-b', 'doc-c'], "the batch's lines, each with its custom_id");
    t.same(await page.locator('tbody tr td:nth-child(9)').first().getAttribute('title'), made.id, 'and its batch id on hover');
    t.same((await page.locator('tbody tr td:nth-child(2)').allTextContents()).sort(), [1, 2, 3].map((n) => `${made.id}-${n}`), 'request ids BATCH_ID-LINE');
    t.ok((await page.locator('a', { hasText: 'Download CSV' }).getAttribute('href'))!.includes(`batch_id=${made.id}`), 'the download keeps the filter');
    for (const [w, h] of [[1280, 800], [390, 844]] as const) {
      await page.setViewportSize({ width: w, height: h });
      await page.waitForTimeout(150);
      await page.screenshot({ path: `${SHOTS}usage-by-batch-${w}.png`, fullPage: true });
    }
    await page.setViewportSize({ width: 1280, height: 800 });

    await page.getByLabel('Group by').selectOption('tag');
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.getByTestId('batch-records').waitFor();
    t.equal(await page.locator('tbody tr').count(), 3, 'a grouping with a batch filter still shows the batch\'s records');
    t.same(errors, [], 'no page errors');
  });
}
