// The console's Upstreams page lists the MCP servers with their reachability (issue #42), in a
// real browser (Debian's chromium through playwright-core) against `tollgate serve`.

import t from 'tap';
import { haveChromium, launch } from '../helpers/browser.js';
import { ADMIN_TOKEN, startConsole } from '../helpers/console.js';
import { deadUrl, startFakeMcp } from '../helpers/mcp.js';

if (haveChromium(t)) {
  const upstream = await startFakeMcp();
  t.teardown(() => upstream.close());
  const down = await deadUrl();
  const rig = await startConsole(t, {}, {}, (c) => {
    c.mcp = { servers: { files: { url: upstream.url }, gone: { url: down, timeout_ms: 1000 } } };
  });
  const ctx = await launch(t);
  const page = await ctx.newPage();
  page.setDefaultTimeout(15_000);
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));

  await t.test('Upstreams: each MCP server, reachable or not', async (t) => {
    await page.goto(`${rig.url}/console/`);
    await page.getByLabel('Admin token', { exact: true }).fill(ADMIN_TOKEN);
    await page.getByRole('button', { name: 'Sign in', exact: true }).click();
    await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Upstreams', exact: true }).click();
    await page.getByRole('heading', { name: 'MCP servers' }).waitFor();
    const files = page.getByRole('row').filter({ hasText: upstream.url });
    await files.getByText('reachable', { exact: true }).waitFor();
    t.match(await files.textContent(), /files.*reachable\s*5/);
    const gone = page.getByRole('row').filter({ hasText: down });
    await gone.getByText(/^unreachable/).waitFor();
    t.same(errors, []);
  });
}
