// A request node:http cannot parse, sent on a keep-alive connection after an earlier request
// there was answered: node has cleared the socket's current response (null, not undefined),
// and the gateway must answer node's bare 400 and keep serving, never throw from its
// clientError handler (which took the whole process down).

import t from 'tap';
import { connect } from 'node:net';
import { request } from 'undici';
import { baseConfig, startGateway } from '../helpers/gateway.js';

/** Writes `first`, waits for its answer, then writes `second`; everything read until the server closes. */
function twoRequests(url: string, first: string, second: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname);
    let out = '';
    let sent = false;
    const timer = setTimeout(() => { socket.destroy(); reject(new Error(`no close; read ${JSON.stringify(out)}`)); }, 5000);
    socket.on('data', (d: Buffer) => {
      out += d.toString('latin1');
      if (!sent && out.includes('\r\n\r\n') && /content-length: 0\r\n|\r\n\r\n[\s\S]*\S/i.test(out)) {
        sent = true;
        socket.write(second);
      }
    });
    socket.on('error', () => undefined);
    socket.on('close', () => { clearTimeout(timer); resolve(out); });
    socket.write(first);
  });
}

t.test('a malformed request after an answered one on the same connection: a bare 400, and the gateway lives on', async (t) => {
  const gw = await startGateway(baseConfig());
  t.teardown(() => gw.close());
  for (const bad of ['GET /v1/usage?a b c HTTP/1.1\r\nhost: x\r\n\r\n', 'GARBAGE\r\n\r\n', 'GET / HTTP/1.1\r\nbad header\r\n\r\n']) {
    const out = await twoRequests(gw.url, 'GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n', bad);
    t.match(out, /^HTTP\/1\.1 200 /, 'the first request was answered');
    t.match(out, /HTTP\/1\.1 400 Bad Request\r\n/, `${JSON.stringify(bad.slice(0, 20))}: node's bare 400 for the second`);
    const again = await request(`${gw.url}/healthz`);
    t.equal(again.statusCode, 200, 'still serving');
    await again.body.text();
  }
});
