// `tollgate keys create|update|list` with a key's attribution controls (CONTRACT section 20):
// --tags, --tags-locked and --end-user-budget-units/-period reach the admin API, the list shows
// them, and a malformed option is refused (exit 2) before anything is sent.

import t from 'tap';
import { spawn } from 'node:child_process';
import { BIN } from '../helpers/child.js';
import { baseConfig, startGateway } from '../helpers/gateway.js';

const ADMIN = 'cli-key-tags-admin-token';
const c = baseConfig();
c.admin = { token: ADMIN };
const gw = await startGateway(c);
t.teardown(() => gw.close());

function cli(...args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    const child = spawn(process.execPath, [BIN, ...args, '--url', gw.url, '--token', ADMIN], { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.on('close', (code) => resolve({ code, out, err }));
  });
}

t.test('keys create, update and list with tags and an end-user budget', async (t) => {
  const made = await cli('keys', 'create', 'demo', '--tags', 'search, prod', '--tags-locked', 'true', '--end-user-budget-units', '500', '--end-user-budget-period', 'day', '--json');
  t.equal(made.code, 0, made.err);
  const id = JSON.parse(made.out).id;
  const listed = await cli('keys', 'list', 'demo', '--json');
  const key = JSON.parse(listed.out).keys.find((k: any) => k.id === id);
  t.same([key.tags, key.tags_locked, key.end_user_budget], [['search', 'prod'], true, { units: 500, period: 'day' }]);
  const text = await cli('keys', 'list', 'demo');
  t.match(text.out, /tags: search, prod \(locked\)/);
  t.match(text.out, /each end user: 500 per day/);

  const updated = await cli('keys', 'update', id, '--tags', 'null', '--tags-locked', 'false', '--end-user-budget-units', 'null', '--json');
  t.equal(updated.code, 0, updated.err);
  t.same([JSON.parse(updated.out).tags, JSON.parse(updated.out).tags_locked, JSON.parse(updated.out).end_user_budget], [[], false, null]);

  const badTag = await cli('keys', 'update', id, '--tags', 'Not-OK');
  t.not(badTag.code, 0, 'the server refuses a bad tag');
  t.match(badTag.err, /tags\[0\]/);
  for (const args of [['--tags-locked', 'yes'], ['--end-user-budget-units', '1.5'], ['--end-user-budget-period', 'day'], ['--end-user-budget-units', '5', '--end-user-budget-period', 'year']]) {
    const r = await cli('keys', 'update', id, ...args);
    t.equal(r.code, 2, args.join(' '));
  }
});
