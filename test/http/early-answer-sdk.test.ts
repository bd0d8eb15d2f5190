// Early answers are readable (CONTRACT section 11), with the official openai SDK: an oversize
// request gets its APIError 413 request_too_large every time, never a connection error (the
// reset a socket closed with bytes unread causes; see early-answer.test.ts).

import t from 'tap';
import OpenAI from 'openai';
import { DEMO_KEY } from '../helpers/gateway.js';
import { BODY, serveEarly, tries } from '../helpers/early-answer.js';

t.test('the official openai SDK sending an oversize request: APIError 413 request_too_large every time', async (t) => {
  const url = await serveEarly(t);
  const client = new OpenAI({ apiKey: DEMO_KEY, baseURL: `${url}/v1`, maxRetries: 0 });
  const content = 'x'.repeat(BODY.length);
  await tries(t, 'SDK 413', async () => {
    const err = await client.chat.completions.create({ model: 'echo-small', messages: [{ role: 'user', content }] }).then(
      () => { throw new Error('the oversize request succeeded'); },
      (e: unknown) => e,
    );
    if (!(err instanceof OpenAI.APIError) || err.status !== 413 || err.code !== 'request_too_large' || err.type !== 'invalid_request_error') {
      throw err instanceof Error ? err : new Error(String(err));
    }
    return true;
  });
});
