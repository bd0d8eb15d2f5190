// Early answers are readable (CONTRACT section 11), with Node's fetch (undici): an answer given
// before the request's body was read (413 on a declared Content-Length above the limit, 401 on
// the headers, 413 for a chunked body past the limit) reaches a client that is still sending.
// Without the lingering close the socket closed with bytes unread, the kernel answered them with
// a reset, and fetch failed with EPIPE instead of giving the envelope (most tries).

import t from 'tap';
import { DEMO_KEY } from '../helpers/gateway.js';
import { BODY, WRONG_KEY, checkEnvelope, fetchOversize, jsonHeaders, serveEarly, tries } from '../helpers/early-answer.js';

let url: string;
t.before(async () => { url = await serveEarly(t); });

t.test("Node's fetch, 45 MB to a 40 MB limit: 413 request_too_large every time", async (t) => {
  await tries(t, '413', () => fetchOversize(t, url, DEMO_KEY, 413, 'request_too_large'));
});

t.test("Node's fetch, a wrong key with a 45 MB body: 401 invalid_api_key every time", async (t) => {
  await tries(t, '401', () => fetchOversize(t, url, WRONG_KEY, 401, 'invalid_api_key'));
});

t.test("Node's fetch, a chunked body (no declared length) past the limit: 413 every time", async (t) => {
  await tries(t, 'chunked 413', async () => {
    const step = 1024 * 1024;
    let at = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(c) {
        if (at >= BODY.length) { c.close(); return; }
        c.enqueue(BODY.subarray(at, at + step));
        at += step;
      },
    });
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: jsonHeaders(DEMO_KEY), body: stream, duplex: 'half' } as RequestInit);
    return checkEnvelope(t, res.status, res.headers, await res.text(), 413, 'request_too_large');
  });
});
