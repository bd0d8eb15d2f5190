// The embedded store with a path, served from a YAML file: a request debits the wallet, SIGTERM
// drains, and `tollgate serve` on the same file again finds the wallet as it was left (the
// journal and snapshot under store.path), then debits it further.

import t from 'tap';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PRICE, WALLET, drainExit, exercise, operatorConfig, serveFile, statusOf, wallet } from '../helpers/operator.js';

t.test('memory store with a path: the wallet outlives a restart', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'tollgate-op-path-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const config = operatorConfig({
    store: { kind: 'memory', path: join(dir, 'state', 'store'), fsync_ms: 0 },
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'm-echo', provider: 'echo', price: PRICE }],
  });
  const first = await serveFile(t, config);
  const spent = await exercise(t, first.url, { model: 'm-echo', answer: /^Say hello/, messages: { model: 'm-echo', answer: /^Say hello/ } });
  const drained = await drainExit(t, first);
  const afterFirst = WALLET - spent - drained;
  t.ok((await readdir(join(dir, 'state', 'store'))).includes('journal.jsonl'), 'the store made its folder and journal');

  const second = await serveFile(t, undefined, first.file);
  t.equal(await statusOf(`${second.url}/readyz`, 200), 200);
  t.equal((await wallet(second.url)).balance_units, afterFirst, 'the wallet as the first run left it, drained stream included');
  const more = await exercise(t, second.url, { model: 'm-echo', answer: /^Say hello/ });
  t.equal((await wallet(second.url)).balance_units, afterFirst - more, 'and debited further');
  await drainExit(t, second);
});

