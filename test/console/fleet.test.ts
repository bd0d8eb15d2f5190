// Two gateways on one Redis (CONTRACT section 12): a console session signed in on one is
// accepted by the other (the signing key comes from the secret they share), signing out on one
// ends it on both (the store's revocation list), and both write one audit log.

import t from 'tap';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import YAML from 'yaml';
import { serveChild } from '../helpers/child.js';
import { startRedis } from '../helpers/redis.js';
import { ADMIN_TOKEN, tokenSignIn, withSession } from '../helpers/console.js';

const redis = await startRedis();
t.teardown(() => redis.stop());
const dir = await mkdtemp(join(tmpdir(), 'tollgate-console-fleet-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const file = join(dir, 'tollgate.yaml');
await writeFile(file, YAML.stringify({
  server: { host: '127.0.0.1', port: 0 },
  admin: { token: ADMIN_TOKEN },
  store: { kind: 'redis', url: redis.url, prefix: `tgc:${randomUUID()}:` },
  plans: { free: { paid: false } },
  accounts: [{ id: 'acme', plan: 'free', wallet_units: 1000 }],
  providers: { echo: { kind: 'echo' } },
  models: [{ id: 'echo-small', provider: 'echo' }],
}));
const a = await serveChild(t, file);
const b = await serveChild(t, file);

t.test('a session from one instance works on the other; signing out on one ends it on both', async (t) => {
  const s = await tokenSignIn(a.url);
  const onB = await fetch(`${b.url}/admin/accounts/acme/credits`, {
    method: 'POST', headers: { ...withSession(s, 'POST'), 'content-type': 'application/json', 'x-request-id': 'fleet-credit' },
    body: JSON.stringify({ units: 5, idempotency_key: 'fleet-1' }),
  });
  t.equal(onB.status, 200, 'B accepts A\'s session and CSRF token');
  const audit = await (await fetch(`${a.url}/admin/audit?limit=5`, { headers: withSession(s, 'GET') })).json() as any;
  t.match(audit.events[0], { actor: 'admin-token', action: 'POST /admin/accounts/{id}/credits', target: 'acme', request_id: 'fleet-credit' }, 'A reads what B audited');
  const out = await fetch(`${a.url}/console/api/logout`, { method: 'POST', headers: withSession(s, 'POST') });
  t.equal(out.status, 204);
  const after = await fetch(`${b.url}/admin/accounts/acme`, { headers: withSession(s, 'GET') });
  t.equal(after.status, 401, 'B refuses the signed-out session');
  t.equal(((await after.json()) as any).error.code, 'not_signed_in');
});
