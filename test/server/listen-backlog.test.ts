// `tollgate serve` listens with a backlog of 4,096 connections (the kernel caps it at
// net.core.somaxconn), not Node's default 511: thousands of clients connecting at once (#46's
// 9,488 streams opened together) overflowed 511, the kernel dropped their handshakes and a
// client that had already sent its request was reset. Read from the kernel's own account of
// the listening socket (`ss`: a LISTEN socket's Send-Q is its backlog).

import t from 'tap';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { promisify } from 'node:util';
import { LISTEN_BACKLOG } from '../../lib/server.js';
import { operatorConfig, serveFile } from '../helpers/operator.js';

const run = promisify(execFile);

t.test('the listening socket of tollgate serve has a backlog of 4096 (or the kernel cap)', async (t) => {
  t.equal(LISTEN_BACKLOG, 4096);
  const somaxconn = Number((await readFile('/proc/sys/net/core/somaxconn', 'utf8')).trim());
  const served = await serveFile(t, operatorConfig());
  const port = new URL(served.url).port;
  const { stdout } = await run('ss', ['-ltnH', `sport = :${port}`]);
  const rows = stdout.trim().split('\n').filter((l) => l.startsWith('LISTEN'));
  t.equal(rows.length, 1, `one listening socket on ${port}: ${stdout}`);
  const backlog = Number(rows[0]!.trim().split(/\s+/)[2]);
  t.equal(backlog, Math.min(LISTEN_BACKLOG, somaxconn), `Send-Q of the LISTEN row: ${rows[0]}`);
  t.ok(backlog > 511, 'more than Node\'s default');
});
