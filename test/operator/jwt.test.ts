// Dashboard JWTs (auth.jwt.secret, HS256), served from a YAML file by `tollgate serve`: the
// openai SDK and the Anthropic SDK with a signed access token as their API key, the account the
// token's `sub` names debited, the metrics, /readyz and a SIGTERM drain.

import t from 'tap';
import { SignJWT } from 'jose';
import { PRICE, drainExit, exercise, operatorConfig, serveFile } from '../helpers/operator.js';

const SECRET = 'operator-jwt-secret-of-some-length';

t.test('auth.jwt with an HS256 secret', async (t) => {
  const served = await serveFile(t, operatorConfig({
    auth: { jwt: { secret: SECRET, issuer: 'dashboard' } },
    providers: { echo: { kind: 'echo' } },
    models: [{ id: 'm-echo', provider: 'echo', price: PRICE }],
  }));
  const token = await new SignJWT({ type: 'access', sub: 'demo', sid: 'session-1' })
    .setProtectedHeader({ alg: 'HS256' }).setIssuer('dashboard').setIssuedAt().setExpirationTime('10m')
    .sign(new TextEncoder().encode(SECRET));
  await exercise(t, served.url, { model: 'm-echo', answer: /^Say hello/, messages: { model: 'm-echo', answer: /^Say hello/ }, credential: token });
  await drainExit(t, served);
});
