// readBody (http/body.ts): a large body with a declared length is copied into one buffer as it
// arrives; what comes out must be exactly the bytes sent, whatever the pieces' sizes, and a body
// below the copy threshold, a chunked body and an oversize one keep their behaviour.

import t from 'tap';
import fc from 'fast-check';
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { readBody } from '../../lib/http/body.js';

const LIMIT = 8 * 1024 * 1024;

t.test('the bytes read are the bytes sent, in any pieces, with and without a declared length', async (t) => {
  const server = createServer((req, res) => {
    readBody(req, LIMIT, 10_000).then(
      (buf) => res.end(JSON.stringify({ size: buf.length, sha: createHash('sha256').update(buf).digest('hex'), owned: buf.byteOffset === 0 && buf.byteLength === buf.buffer.byteLength })),
      (err) => { res.statusCode = 400; res.end(JSON.stringify({ code: err.code })); },
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const { port } = server.address() as AddressInfo;

  const send = (body: Buffer, pieces: number[], chunked: boolean) => new Promise<any>((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let got = '';
    socket.on('data', (d) => { got += d; });
    socket.on('end', () => resolve(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4))));
    socket.on('error', reject);
    socket.write(`POST / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n${chunked ? 'transfer-encoding: chunked' : `content-length: ${body.length}`}\r\n\r\n`);
    let at = 0;
    let i = 0;
    const next = () => {
      if (at >= body.length) { if (chunked) socket.write('0\r\n\r\n'); return; }
      const n = Math.max(1, pieces[i++ % pieces.length]!);
      const piece = body.subarray(at, at + n);
      at += piece.length;
      socket.write(chunked ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')]) : piece, next);
    };
    next();
  });

  let runs = 0;
  await fc.assert(fc.asyncProperty(
    fc.integer({ min: 0, max: 3 * 1024 * 1024 }), fc.array(fc.integer({ min: 1, max: 700_000 }), { minLength: 1, maxLength: 5 }), fc.boolean(),
    async (size, pieces, chunked) => {
      const body = randomBytes(size);
      const got = await send(body, pieces, chunked);
      runs++;
      if (size === 0) return got.size === 0;
      return got.size === size && got.sha === createHash('sha256').update(body).digest('hex');
    },
  ), { seed: 4242, numRuns: 25 });
  t.equal(runs, 25);

  // A declared body past the copy threshold comes out as one buffer that owns its memory.
  const big = randomBytes(2 * 1024 * 1024 + 17);
  const got = await send(big, [65_536, 1, 300_000], false);
  t.equal(got.size, big.length);
  t.equal(got.owned, true, 'handed to the JSON worker without a copy');
  // Over the limit: 413, whether declared or counted.
  const over = await send(randomBytes(LIMIT + 1), [1 << 20], true);
  t.equal(over.code, 'request_too_large');
});
