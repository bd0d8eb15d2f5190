// lib/upstream/undici.ts loads only undici's Pool, request API, errors and header parser, not its
// index: they must be the very objects the index exports (one module cache), so that errors
// thrown by a pool are instances of `errors.X` whichever way they were imported, and a pool
// must still have the request API the index installs on every dispatcher.

import t from 'tap';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as undici from 'undici';
import { Pool, errors, parseHeaders } from '../../lib/upstream/undici.js';

t.test('the same classes and functions as undici\'s index', async (t) => {
  t.equal(Pool, undici.Pool);
  t.equal(errors, undici.errors);
  t.equal(errors.HeadersTimeoutError, undici.errors.HeadersTimeoutError);
  t.equal(parseHeaders, undici.util.parseHeaders);
  for (const m of ['request', 'stream', 'pipeline', 'upgrade', 'connect'] as const) {
    t.equal(typeof Pool.prototype[m], 'function', `Pool.prototype.${m}`);
  }
});

t.test('a pool answers request() and its timeouts throw the index\'s error classes', async (t) => {
  const server = createServer((req, res) => {
    if (req.url === '/slow') return; // never answers
    res.setHeader('x-a', 'b');
    res.end('hello');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { headersTimeout: 200 });
  t.teardown(async () => { await pool.destroy(); server.closeAllConnections(); server.close(); });
  const res = await pool.request({ method: 'GET', path: '/' });
  t.equal(res.statusCode, 200);
  t.equal(res.headers['x-a'], 'b');
  t.equal(await res.body.text(), 'hello');
  await t.rejects(pool.request({ method: 'GET', path: '/slow' }), undici.errors.HeadersTimeoutError);
});
