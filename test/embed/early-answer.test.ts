// Embedded in a host app (Express, its own process and server): early answers are readable
// there too (CONTRACT section 11). The lingering close is the gateway's per request, not a
// feature of its own server: Node's fetch and a pausing raw client read every 413.

import t from 'tap';
import { DEMO_KEY } from '../helpers/gateway.js';
import { fetchOversize, pausing, serveEmbedded, tries } from '../helpers/early-answer.js';

let url: string;
t.before(async () => { url = await serveEmbedded(t); });

t.test("Node's fetch, 45 MB to a 40 MB limit, through Express: 413 every time", async (t) => {
  t.equal(await (await fetch(`${url}/`)).text(), 'host app', 'the host app serves its own routes');
  await tries(t, '413', () => fetchOversize(t, url, DEMO_KEY, 413, 'request_too_large'));
});

t.test('a pausing raw client, through Express: 413 every time', (t) => pausing(t, url, DEMO_KEY, false, 413, 'request_too_large'));
