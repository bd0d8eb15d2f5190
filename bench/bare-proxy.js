// A bare pass-through proxy (node:http in, undici Pool out, no checks, no logging) used by
// bench/run.js when BENCH_BARE_PROXY=1: the floor that any one-hop Node.js proxy on this
// machine adds, to read Tollgate's figures against.
//
// Usage: node bench/bare-proxy.js UPSTREAM_ORIGIN   prints "bare proxy listening on PORT".

import { createServer } from 'node:http';
import { Pool } from 'undici';

const upstream = process.argv[2];
if (!upstream) {
  process.stderr.write('usage: node bench/bare-proxy.js UPSTREAM_ORIGIN\n');
  process.exit(2);
}
const pool = new Pool(upstream, { connections: 1024, pipelining: 1, keepAliveTimeout: 30_000 });

const server = createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  const parts = [];
  req.on('data', (b) => parts.push(b));
  req.on('end', async () => {
    const ac = new AbortController();
    res.on('close', () => { if (!res.writableFinished) ac.abort(); });
    try {
      const up = await pool.request({
        method: 'POST', path: req.url, headers: { 'content-type': 'application/json' }, body: Buffer.concat(parts), signal: ac.signal,
      });
      const headers = { 'content-type': up.headers['content-type'] ?? 'application/json' };
      if (up.headers['content-length'] !== undefined) headers['content-length'] = up.headers['content-length'];
      res.writeHead(up.statusCode, headers);
      for await (const chunk of up.body) res.write(chunk);
      res.end();
    } catch {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    }
  });
});

server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`bare proxy listening on ${server.address().port}\n`);
});

const stop = () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
