// Early answers are readable (CONTRACT section 11), for a client that writes before it reads
// (a blocking client): the headers and 1 MB, a pause of a second, the rest, then it reads.
// Without the lingering close its next write met a reset (EPIPE) and the answer was lost.

import t from 'tap';
import { DEMO_KEY } from '../helpers/gateway.js';
import { WRONG_KEY, pausing, serveEarly } from '../helpers/early-answer.js';

let url: string;
t.before(async () => { url = await serveEarly(t); });

t.test('over the declared limit: 413 request_too_large', (t) => pausing(t, url, DEMO_KEY, false, 413, 'request_too_large'));
t.test('a wrong key: 401 invalid_api_key', (t) => pausing(t, url, WRONG_KEY, false, 401, 'invalid_api_key'));
t.test('chunked, past the limit: 413 request_too_large', (t) => pausing(t, url, DEMO_KEY, true, 413, 'request_too_large'));
