// Chromium for the console's browser tests: Debian's /usr/bin/chromium (never a downloaded
// browser), driven by playwright-core, headless, with a fresh profile each launch. With CI=true
// a missing chromium fails the test; elsewhere the test is skipped with the reason.

import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

/** Whether the test can run; a skip (or, with CI=true, a failure) when chromium is missing. */
export function haveChromium(t: any): boolean {
  if (existsSync(CHROMIUM)) return true;
  if (process.env.CI === 'true') { t.fail(`${CHROMIUM} is missing (apt-get install -y chromium)`); return false; }
  t.skip(`${CHROMIUM} is missing (apt-get install -y chromium)`);
  return false;
}

/** A browser with a fresh profile (its --user-data-dir), closed and removed at teardown. */
export async function launch(t: any, viewport = { width: 1280, height: 800 }): Promise<BrowserContext> {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-chromium-'));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS, viewport, acceptDownloads: true,
  });
  t.teardown(async () => {
    await ctx.close().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
  });
  return ctx;
}
