// The developer-key cache of the Authenticator, against a real store whose lookups the test
// can hold back or fail: a key in use is looked up again before its entry runs out, in the
// background, once at a time, and no request waits for it; an answer read before a revocation
// was announced is never cached after it; a failed lookup leaves the entry to run out; a use
// the store's hold recorded is not written again.

import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { sha256Hex } from '../../lib/auth/keys.js';
import { Authenticator, CACHE_TTL_MS, REFRESH_AHEAD_MS } from '../../lib/auth/authenticator.js';
import { validateConfig } from '../../lib/config/load.js';
import { StoreUnavailableError } from '../../lib/errors.js';
import { MemoryStore } from '../../lib/store/memory.js';
import type { KeyWithAccount, KnownKey, Store } from '../../lib/store/types.js';
import { DEMO_KEY, baseConfig } from '../helpers/gateway.js';

const AUTH = `Bearer ${DEMO_KEY}`;
/** What authenticate() needs of a request for a key without an address allowlist. */
const REQ = {} as IncomingMessage;
/** Into an entry's last REFRESH_AHEAD_MS, well before it runs out. */
const INTO_WINDOW_MS = CACHE_TTL_MS - REFRESH_AHEAD_MS + 60;

/** A memory store whose key lookups the test can count, hold back (after reading) or fail. */
async function rig(t: any, opts: { holdRecordsKeyUse?: boolean } = {}) {
  const config = validateConfig(baseConfig());
  const inner = new MemoryStore({ path: null });
  await inner.seed(config.accounts);
  const lookups: Array<KnownKey | undefined> = [];
  const touched: Array<{ id: string; at: number }> = [];
  let gate: { wait: Promise<void>; open: () => void } | null = null;
  let failing = false;
  const store = new Proxy(inner, {
    get(target, prop) {
      if (prop === 'keyWithAccount') {
        return async (digest: string, known?: KnownKey): Promise<KeyWithAccount | undefined> => {
          lookups.push(known);
          if (failing) throw new StoreUnavailableError(new Error('store down'));
          const found = await (target as Store).keyWithAccount(digest, known);
          if (gate !== null) await gate.wait; // read now, answered later
          return found;
        };
      }
      if (prop === 'touchKeys') {
        return async (uses: Array<{ account: string; id: string; at: number }>) => {
          touched.push(...uses.map((u) => ({ id: u.id, at: u.at })));
          return target.touchKeys(uses);
        };
      }
      if (prop === 'holdRecordsKeyUse' && opts.holdRecordsKeyUse !== undefined) return opts.holdRecordsKeyUse;
      const v = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  }) as Store;
  const auth = new Authenticator(store, config);
  t.teardown(async () => { auth.close(); await inner.close(); });
  return {
    auth, inner, lookups, touched,
    close: () => { let open!: () => void; gate = { wait: new Promise<void>((r) => { open = r; }), open }; },
    open: () => { gate?.open(); gate = null; },
    fail: (on: boolean) => { failing = on; },
    keyId: async () => (await inner.keyWithAccount(sha256Hex(DEMO_KEY)))!.key.id,
  };
}

t.test('a key in use is looked up again before its entry runs out: once at a time, and nobody waits', async (t) => {
  const r = await rig(t);
  const first = await r.auth.authenticate(AUTH);
  t.strictSame(r.lookups, [undefined], 'looked up once, from nothing');
  await sleep(INTO_WINDOW_MS);
  r.close();
  // The lookup is held back: these are served from the entry all the same.
  const served = await Promise.all(Array.from({ length: 5 }, () => r.auth.authenticate(AUTH)));
  for (const p of served) t.equal(p, first, 'the cached principal, at once');
  t.equal(r.lookups.length, 2, 'one lookup for five requests');
  t.strictSame(r.lookups[1], { id: await r.keyId(), account: 'demo' }, 'with where the digest led: one round trip on Redis');
  r.open();
  await sleep(10);
  await sleep(REFRESH_AHEAD_MS); // the first entry would have run out by now
  r.close(); // a request that had to look the key up itself would wait for this
  const later = await Promise.race([r.auth.authenticate(AUTH), sleep(300).then(() => 'waited' as const)]);
  t.not(later, 'waited', 'served from the entry the lookup made, at once');
  t.equal(r.lookups.length, 3);
  t.ok(r.lookups[2] !== undefined, 'the only lookup since is the next one in the background');
  r.open();
});

t.test('an answer read before a revocation was announced is never cached after it', async (t) => {
  t.test('a lookup in the background', async (t) => {
    const r = await rig(t);
    await r.auth.authenticate(AUTH);
    await sleep(INTO_WINDOW_MS);
    r.close();
    await r.auth.authenticate(AUTH); // starts the lookup; it reads the key while still valid
    await sleep(10);
    t.equal(r.lookups.length, 2);
    t.ok(await r.inner.revokeKey(await r.keyId()), 'revoked, and announced');
    r.open();
    await sleep(10);
    const err: any = await r.auth.authenticate(AUTH).catch((e) => e);
    t.equal(err.code, 'invalid_api_key', 'refused: the stale answer was not cached');
    t.equal(r.lookups.length, 3, 'the key was looked up afresh');
  });

  t.test("a request's own lookup", async (t) => {
    const r = await rig(t);
    r.close();
    const pending = r.auth.authenticate(AUTH);
    await sleep(10);
    t.ok(await r.inner.revokeKey(await r.keyId()), 'revoked, and announced');
    r.open();
    t.equal((await pending).accountId, 'demo', 'the request that asked before the revocation is answered');
    const err: any = await r.auth.authenticate(AUTH).catch((e) => e);
    t.equal(err.code, 'invalid_api_key', 'the next is refused: the answer was not cached');
    t.equal(r.lookups.length, 2);
  });
});

t.test('a failed lookup in the background leaves the entry to serve until it runs out', async (t) => {
  const r = await rig(t);
  const first = await r.auth.authenticate(AUTH);
  await sleep(INTO_WINDOW_MS);
  r.fail(true);
  t.equal(await r.auth.authenticate(AUTH), first, 'served from the entry');
  await sleep(10);
  t.equal(r.lookups.length, 2, 'the lookup was tried');
  t.equal(await r.auth.authenticate(AUTH), first, 'still served while the entry lasts');
  await sleep(REFRESH_AHEAD_MS);
  const err = await r.auth.authenticate(AUTH).catch((e) => e);
  t.ok(err instanceof StoreUnavailableError, 'once it ran out, the request itself meets the outage (503)');
  r.fail(false);
  t.equal((await r.auth.authenticate(AUTH)).accountId, 'demo', 'and the store back, the key is served again');
});

t.test("a use the store's hold recorded is not written again; other uses are", async (t) => {
  t.test('a store whose hold records it (Redis)', async (t) => {
    const r = await rig(t, { holdRecordsKeyUse: true });
    const p = await r.auth.authenticate(AUTH, REQ);
    r.auth.held(p, Date.now());
    await r.auth.flushUses();
    t.strictSame(r.touched, [], 'nothing left to write');
    const q = await r.auth.authenticate(AUTH, REQ);
    r.auth.held(q, Date.now() - 60_000); // a hold asked for before this use
    await r.auth.flushUses();
    t.equal(r.touched.length, 1, 'a use after the hold was asked for is still written');
  });

  t.test('the memory store (its holds are not journaled)', async (t) => {
    const r = await rig(t);
    const p = await r.auth.authenticate(AUTH, REQ);
    r.auth.held(p, Date.now());
    await r.auth.flushUses();
    t.equal(r.touched.length, 1, 'written by the batch');
    t.ok((await r.inner.getKey(await r.keyId()))!.last_used_at !== null, 'and recorded');
  });
});
