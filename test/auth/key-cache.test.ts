// The developer-key cache of the Authenticator, against a real store whose lookups the test
// can hold back or fail: a key in use is looked up again before its entry runs out, in the
// background, once at a time, and no request waits for it; an answer read before a revocation
// was announced is never cached after it; a failed lookup leaves the entry to run out; a use
// the store's hold recorded is not written again.

import t from 'tap';
import type { IncomingMessage } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { sha256Hex } from '../../lib/store/digest.js';
import { Authenticator, CACHE_TTL_MS, REFRESH_AHEAD_MS, TOUCH_FLUSH_MS } from '../../lib/auth/authenticator.js';
import { validateConfig } from '../../lib/config/load.js';
import { StoreUnavailableError } from '../../lib/errors.js';
import { MemoryStore } from '../../lib/store/memory/store.js';
import { defaultControls, type KeyWithAccount, type KnownKey, type Revocation, type Store } from '../../lib/store/types.js';
import { DEMO_KEY, baseConfig } from '../helpers/gateway.js';

const AUTH = `Bearer ${DEMO_KEY}`;
/** What authenticate() needs of a request for a key without an address allowlist. */
const REQ = {} as IncomingMessage;
/** Into an entry's last REFRESH_AHEAD_MS, well before it runs out. */
const INTO_WINDOW_MS = CACHE_TTL_MS - REFRESH_AHEAD_MS + 60;

/**
 * A memory store whose key lookups the test can count, hold back (after reading; with
 * `gateRefreshes`, only lookups of a cached key) or fail, and whose announcements it can mute.
 */
async function rig(t: any, opts: { holdRecordsKeyUse?: boolean; onError?: 'open'; gateRefreshes?: boolean } = {}) {
  const raw = baseConfig();
  if (opts.onError !== undefined) raw.store = { kind: 'memory', on_error: opts.onError };
  const config = validateConfig(raw);
  const inner = new MemoryStore({ path: null });
  await inner.seed(config.accounts);
  const lookups: Array<KnownKey | undefined> = [];
  const touched: Array<{ id: string; at: number }> = [];
  let gate: { wait: Promise<void>; open: () => void } | null = null;
  let failing = false;
  let muted = false;
  let heard: ((r: Revocation) => void) | undefined;
  const store = new Proxy(inner, {
    get(target, prop) {
      if (prop === 'keyWithAccount') {
        return async (digest: string, known?: KnownKey): Promise<KeyWithAccount | undefined> => {
          lookups.push(known);
          if (failing) throw new StoreUnavailableError(new Error('store down'));
          const found = await (target as Store).keyWithAccount(digest, known);
          if (gate !== null && (known !== undefined || opts.gateRefreshes !== true)) await gate.wait; // read now, answered later
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
      if (prop === 'onRevoke') {
        return (listener: (r: Revocation) => void) => {
          heard = listener;
          return target.onRevoke((r) => { if (!muted) listener(r); });
        };
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  }) as Store;
  const auth = new Authenticator(store, config);
  t.teardown(async () => { auth.close(); await inner.close(); });
  // Opened by the test, or after 2 s: a request that waits on it fails its test, never hangs it.
  const close = () => {
    let open!: () => void;
    gate = { wait: new Promise<void>((r) => { open = r; setTimeout(r, 2000).unref(); }), open };
  };
  const open = () => { gate?.open(); gate = null; };
  return {
    auth, inner, lookups, touched, close, open,
    /** The key cached, then used in its entry's last REFRESH_AHEAD_MS: its background lookup has read the store and is held back. */
    refreshHeld: async () => {
      await auth.authenticate(AUTH);
      await sleep(INTO_WINDOW_MS);
      close();
      await auth.authenticate(AUTH);
      await sleep(10);
    },
    /** Whether a request is served without a lookup of its own (one would wait on the closed gate). */
    servedAtOnce: async () => {
      close();
      const r = await Promise.race([auth.authenticate(AUTH).then(() => true), sleep(300).then(() => false)]);
      open();
      return r;
    },
    fail: (on: boolean) => { failing = on; },
    mute: (on: boolean) => { muted = on; },
    /** What the store announces by itself (Redis: `missed` when its subscription is back). */
    announce: (r: Revocation) => heard!(r),
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
  t.ok(await r.servedAtOnce(), 'served from the entry the lookup made, at once');
  t.equal(r.lookups.length, 3);
  t.ok(r.lookups[2] !== undefined, 'the only lookup since is the next one in the background');
});

t.test('an answer read before a revocation was announced is never cached after it', async (t) => {
  t.test('a lookup in the background', async (t) => {
    const r = await rig(t);
    await r.refreshHeld(); // the lookup read the key while still valid
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

t.test("a session's revocation announced during a lookup does not void it (it says nothing of keys)", async (t) => {
  const r = await rig(t);
  await r.refreshHeld();
  await r.inner.revokeSession('sess-1'); // announced to this instance
  r.open();
  await sleep(10);
  await sleep(REFRESH_AHEAD_MS); // the first entry would have run out by now
  t.ok(await r.servedAtOnce(), "served from the lookup's entry: it was cached");
});

t.test('a slow lookup in the background never replaces a newer answer', async (t) => {
  const r = await rig(t, { gateRefreshes: true });
  await r.refreshHeld(); // the lookup read the key while valid, and stalls
  r.mute(true); // this instance misses the announcement
  t.ok(await r.inner.revokeKey(await r.keyId()), 'revoked');
  await sleep(REFRESH_AHEAD_MS); // the entry runs out
  const err: any = await r.auth.authenticate(AUTH).catch((e) => e);
  t.equal(err.code, 'invalid_api_key', "a request's own lookup finds it revoked");
  r.open();
  await sleep(10);
  const again: any = await r.auth.authenticate(AUTH).catch((e) => e);
  t.equal(again.code, 'invalid_api_key', 'the stalled answer did not bring the key back');
});

t.test('a rotated-out digest near the end of its grace is not looked up again and again', async (t) => {
  const r = await rig(t);
  const id = await r.keyId();
  const grace = Date.now() + CACHE_TTL_MS - 100;
  t.ok(await r.inner.rotateKey(id, sha256Hex('tg_demo_rotated'), 'ated', grace), 'rotated');
  t.equal((await r.auth.authenticate(AUTH)).accountId, 'demo', 'the old key, in its grace');
  t.equal(r.lookups.length, 1);
  await sleep(CACHE_TTL_MS - 100 - REFRESH_AHEAD_MS + 60);
  t.equal((await r.auth.authenticate(AUTH)).accountId, 'demo', 'still in its grace');
  await sleep(10);
  t.equal(r.lookups.length, 1, 'no lookup: the grace only shrinks');
  await sleep(Math.max(0, grace - Date.now()) + 20);
  const err: any = await r.auth.authenticate(AUTH).catch((e) => e);
  t.equal(err.code, 'invalid_api_key', 'refused once the grace is over');
});

t.test("store.on_error: open — a refusal during an announcement still takes the key out of the outage fallback", async (t) => {
  const r = await rig(t, { onError: 'open' });
  const id = await r.keyId();
  t.ok(await r.inner.createKey({ id: 'key_other', account: 'demo', digest: sha256Hex('tg_demo_other'), controls: defaultControls() }));
  t.ok(await r.inner.rotateKey(id, sha256Hex('tg_demo_rotated'), 'ated', Date.now() + 50), 'rotated, a short grace');
  t.equal((await r.auth.authenticate(AUTH)).accountId, 'demo', 'the old key, in its grace (so known for an outage)');
  await sleep(CACHE_TTL_MS + 50); // grace over, entry gone
  r.close();
  const refused = r.auth.authenticate(AUTH).catch((e) => e);
  await sleep(10);
  await r.inner.revokeKey('key_other'); // announced while the lookup is under way
  r.open();
  t.equal((await refused).code, 'invalid_api_key', 'refused: its grace is over');
  r.fail(true);
  const err = await r.auth.authenticate(AUTH).catch((e) => e);
  t.ok(err instanceof StoreUnavailableError, 'in an outage it is not served from the fallback (503, not the old principal)');
});

t.test('a use noted just before a batch is left to the next one, so that its hold can drop it', async (t) => {
  const r = await rig(t, { holdRecordsKeyUse: true });
  const a = await r.auth.authenticate(AUTH, REQ); // arms the batch a second from now
  r.auth.held(a, Date.now());
  await sleep(TOUCH_FLUSH_MS - 100);
  const b = await r.auth.authenticate(AUTH, REQ); // noted about 100 ms before the batch
  await sleep(150); // the batch has run
  r.auth.held(b, Date.now()); // its hold, a while after its authentication
  await sleep(TOUCH_FLUSH_MS + 100); // and the next
  t.strictSame(r.touched, [], 'nothing written: both uses were recorded by their holds');
  await r.auth.authenticate(AUTH, REQ); // a use no hold follows
  await sleep(TOUCH_FLUSH_MS * 1.5 + 200);
  t.equal(r.touched.length, 1, 'written by a batch within a second and a half');
});

// store.on_error: open serves keys from two fallbacks while the store is down: those this
// instance saw resolve in the last 10 minutes, and the config's own keys. What the store or its
// announcements say of a key takes it out of both (a black-box attack found a rotated key's old
// plaintext and a PATCHed key's old controls served in an outage, even on the instance that
// made the change).
t.test('store.on_error: open — an outage never serves a key as it was before a change', async (t) => {
  const outage = async (t: any, r: Awaited<ReturnType<typeof rig>>, what: string) => {
    r.fail(true);
    const err = await r.auth.authenticate(AUTH, REQ).catch((e) => e);
    t.ok(err instanceof StoreUnavailableError, `${what}: 503 in the outage, not the key as it was`);
  };

  t.test('rotated (grace 0): the old plaintext', async (t) => {
    const r = await rig(t, { onError: 'open' });
    await r.auth.authenticate(AUTH, REQ);
    t.ok(await r.inner.rotateKey(await r.keyId(), sha256Hex('tg_demo_rotated'), 'ated', Date.now()), 'rotated, announced');
    await outage(t, r, 'rotated');
  });

  t.test('expired by a PATCH', async (t) => {
    const r = await rig(t, { onError: 'open' });
    await r.auth.authenticate(AUTH, REQ);
    t.ok(await r.inner.updateKey(await r.keyId(), { expires_at: Date.parse('2020-01-01') }), 'patched, announced');
    await outage(t, r, 'expired');
  });

  t.test('rotated with a grace, the announcement lost: seen in its grace, then the outage', async (t) => {
    const r = await rig(t, { onError: 'open' });
    await r.auth.authenticate(AUTH, REQ);
    r.mute(true);
    const graceEnds = Date.now() + CACHE_TTL_MS + 500;
    t.ok(await r.inner.rotateKey(await r.keyId(), sha256Hex('tg_demo_rotated'), 'ated', graceEnds), 'rotated');
    await sleep(CACHE_TTL_MS + 50); // the entry runs out; the next request sees the digest in its grace
    t.equal((await r.auth.authenticate(AUTH, REQ)).accountId, 'demo', 'in its grace');
    await sleep(Math.max(0, graceEnds - Date.now()) + 20);
    await outage(t, r, 'an outage that outlasts the grace');
  });

  t.test("the config's key, revoked in the store before this instance started", async (t) => {
    const r = await rig(t, { onError: 'open' });
    r.mute(true); // as if revoked before the start: this instance never hears of it
    t.ok(await r.inner.revokeKey(await r.keyId()), 'revoked');
    await r.auth.checkConfigKeys(); // what the gateway does after each seed
    await outage(t, r, 'revoked');
  });

  t.test("the config's key the store still has: served in an outage with its stored controls", async (t) => {
    const r = await rig(t, { onError: 'open' });
    r.mute(true);
    t.ok(await r.inner.updateKey(await r.keyId(), { models: ['echo-vision'] }), 'patched');
    await r.auth.checkConfigKeys();
    r.fail(true);
    const p = await r.auth.authenticate(AUTH, REQ);
    t.equal(p.accountId, 'demo', 'served in the outage');
    t.strictSame(p.key?.patterns, ['echo-vision'], 'with the controls the store gave it');
  });
});

t.test('announcements lost (the subscription re-established): nothing learnt before is trusted as it was', async (t) => {
  const r = await rig(t, { onError: 'open' });
  await r.auth.authenticate(AUTH, REQ);
  t.equal(r.lookups.length, 1);
  r.mute(true); // the revocation's announcement is lost
  t.ok(await r.inner.revokeKey(await r.keyId()), 'revoked');
  r.mute(false);
  r.announce({ kind: 'missed' }); // as the Redis store says when its subscriber connects again
  await sleep(10); // the config's keys are checked again meanwhile
  r.fail(true);
  const down = await r.auth.authenticate(AUTH, REQ).catch((e) => e);
  t.ok(down instanceof StoreUnavailableError, 'in an outage right after: 503, served neither from the cache nor from a fallback');
  r.fail(false);
  const err: any = await r.auth.authenticate(AUTH, REQ).catch((e) => e);
  t.equal(err.code, 'invalid_api_key', 'the store back: refused');
});
